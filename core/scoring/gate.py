"""Activation gated on a verification of the scorer's exact bytes.

`props scorers activate NAME@VERSION` makes a scorer the active one only when a verification
of the same identity (props.core.scoring.identity) is recorded here (an imported one does not
count: what arrives from outside adds, it never decides for this database), completed, on a
cohort that is still current (props.core.scoring.cohorts.stale), and passing the operator's
policy. Otherwise it refuses, saying exactly what to run; `--force --reason TEXT` activates
anyway, recording who and why (`scorer.forced`, in the same write as the activation), and
the figures that scorer grades say so.

The policy is the operator's, in `$PROPS_POLICY_FILE` (default `$PROPS_HOME/policy.toml`):

    [verification]
    min_label_accuracy = 0.75     # share of the labelled cases' issues graded right
    min_people_agreement = 0.75   # with people's verdicts in the cohort, when there are ...
    min_people_issues = 10        # ... at least this many reviewed issues
    max_unreadable = 0.05         # share of the cohort's issues the judge's answer left unread
    min_runs = 1                  # runs of the cohort replayed under both scorers
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import tomllib
from pathlib import Path

from props.core.domain import catalog, streams
from props.core.log import embedded, errors
from props.core.log.store import EventStore
from props.core.scoring import cohorts, identity, registration, scorers


class ActivationRefused(errors.PropsError):
    """The gate refused: no completed, current, passing verification of these exact bytes."""

    exit_code = 77  # EX_NOPERM


@dataclasses.dataclass(frozen=True)
class Policy:
    min_label_accuracy: float = 0.75
    min_people_agreement: float = 0.75
    min_people_issues: int = 10
    max_unreadable: float = 0.05
    min_runs: int = 1

    def failures(self, v: catalog.ScorerVerified) -> list[str]:
        """What in `v` falls short of the policy (nothing: it passes)."""
        out = []
        if v.replayed_runs < self.min_runs:
            out.append(f"{v.replayed_runs} run(s) replayed, the policy asks {self.min_runs}")
        if v.labels is None or v.labels.share is None:
            out.append("not measured on the labelled cases")
        elif v.labels.share < self.min_label_accuracy:
            out.append(f"labelled cases: {v.labels.agreed}/{v.labels.issues} right "
                       f"({v.labels.share:.0%}), the policy asks {self.min_label_accuracy:.0%}")
        if v.people is not None and v.people.issues >= self.min_people_issues \
                and (v.people.share or 0.0) < self.min_people_agreement:
            out.append(f"agrees with people on {v.people.agreed}/{v.people.issues} "
                       f"({v.people.share or 0:.0%}), the policy asks "
                       f"{self.min_people_agreement:.0%}")
        unread = sum(d.issues for d in v.diverged if d.reason == "judge answer unreadable")
        if v.candidates and unread / v.candidates > self.max_unreadable:
            out.append(f"{unread} of {v.candidates} issue(s) with an answer it could not read "
                       f"(the policy allows {self.max_unreadable:.0%})")
        return out


def policy_file() -> Path:
    configured = os.environ.get("PROPS_POLICY_FILE")
    return Path(configured) if configured else embedded.default_home() / "policy.toml"


def policy() -> Policy:
    """The operator's policy (the defaults above where the file says nothing)."""
    path = policy_file()
    try:
        table = tomllib.loads(path.read_text()).get("verification", {})
    except FileNotFoundError:
        return Policy()
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise errors.ConfigurationError(f"cannot read the policy file {path}: {exc}") from exc
    fields = {f.name: f.type for f in dataclasses.fields(Policy)}
    if not isinstance(table, dict) or set(table) - set(fields) or any(
            isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 10**6
            for v in table.values()):
        raise errors.ConfigurationError(
            f"{path}: [verification] takes numbers for {', '.join(fields)}")
    return Policy(**table)


@dataclasses.dataclass(frozen=True)
class Standing:
    """Where a scorer stands with the gate: the verification that lets it through, or why
    none does and what to run."""

    identity_hash: str
    verified: catalog.ScorerVerified | None
    refusal: str | None


async def _run_hint(store: EventStore, ref: str) -> str:
    latest = await cohorts.latest_evaluation(store)
    where = f"--cohort {latest}" if latest else "--as-of HEAD (every run finished so far)"
    return f"`props scorers verify {ref} {where}`"


async def standing(store: EventStore, s: scorers.Scorer, rules: Policy) -> Standing:
    """Whether `s`, exactly as this process has it, may be activated."""
    ident = identity.identity(s)
    ref = scorers.ref(s)
    mine, others = [], 0
    for rec in await store.read_stream(streams.scorer(s.name)):
        e = rec.event
        if isinstance(e, catalog.ScorerVerified) and e.version == s.version \
                and not rec.imported:
            if e.identity_hash == ident:
                mine.append((rec.global_position, e))
            else:
                others += 1
    run = await _run_hint(store, ref)
    if not mine:
        why = (f"{ref} is not the scorer that was verified: its bytes changed since "
               f"(identity {identity.short(ident)} now)" if others
               else f"{ref} (identity {identity.short(ident)}) was never verified here")
        return Standing(ident, None, f"{why}; run {run}")
    problems = []  # (why, what to do), the newest verification's first
    for position, v in reversed(mine):
        if v.status != "completed":
            problems.append((f"the verification on {v.cohort.kind} {v.cohort.name} is "
                             f"{v.status}: run it again to finish it", f"run {run}"))
        elif (old := await cohorts.stale(store, v.cohort, position)) is not None:
            problems.append((f"the verification on {v.cohort.kind} {v.cohort.name} is no "
                             f"longer current: {old}", f"run {run}"))
        elif failed := rules.failures(v):
            # Verifying the same bytes again would measure the same: what changes the
            # answer is another scorer, or the operator's policy.
            problems.append((f"the verification on {v.cohort.kind} {v.cohort.name} falls "
                             f"short of the policy ({policy_file()}): {'; '.join(failed)}",
                             "verify a better scorer (a new version), or change the policy "
                             "if it asks too much"))
        else:
            return Standing(ident, v, None)
    why, todo = problems[0]
    return Standing(ident, None, f"{ref}: {why}; {todo}")


async def activate(store: EventStore, s: scorers.Scorer, *, force_reason: str | None = None,
                   rules: Policy | None = None) -> tuple[bool, Standing]:
    """Make `s` the active scorer if the gate lets it through, or `force_reason` is given
    (recorded with who asked). Returns whether anything changed; refuses with
    ActivationRefused, writing nothing. Asking for the active scorer changes nothing."""
    if await registration.active_scorer(store) == scorers.ref(s):
        return False, Standing(identity.identity(s), None, None)
    where = await standing(store, s, rules or policy())
    if where.refusal is not None and force_reason is None:
        raise ActivationRefused(f"refused: {where.refusal}; or activate anyway with "
                                f"--force --reason TEXT (recorded)")
    await registration.ensure_registered(store, s)
    forced = None
    if where.refusal is not None:
        assert force_reason is not None
        forced = catalog.ScorerForced(
            name=s.name, version=s.version, identity_hash=where.identity_hash,
            reason=force_reason, actor=actor(), refused=where.refusal[:2000])
    return await registration.activate(store, s.name, s.version, forced), where


def actor() -> str:
    """Who asked: the operating system's user (what the log can know of a person here)."""
    try:
        return getpass.getuser()[:200] or "unknown"
    except (KeyError, OSError):
        return "unknown"


async def figure_standing(store: EventStore, ref: str) -> dict[str, str]:
    """How the figures a scorer grades stand, as the report says beside them: its identity
    (short) and `verified` (a completed verification of these exact bytes is recorded here),
    `forced` (activated past the gate, with who and why) or `unverified`."""
    try:
        name, version = streams.parse_ref(ref)
    except ValueError:
        return {"identity": "", "standing": "unverified", "detail": "not NAME@VERSION"}
    try:
        ident: str | None = identity.identity(scorers.scorer(ref))
    except errors.PropsError:  # a grader image's, or a judge no longer configured
        ident = None
    verified, forced = False, None
    for rec in await store.read_stream(streams.scorer(name)):
        e = rec.event
        if rec.imported or getattr(e, "version", None) != version:
            continue
        if isinstance(e, catalog.ScorerVerified) and e.status == "completed" \
                and e.identity_hash == ident:
            verified = True
        elif isinstance(e, catalog.ScorerForced):
            forced = e
    shown = identity.short(ident) if ident else ""
    if verified:
        return {"identity": shown, "standing": "verified", "detail": ""}
    if forced is not None:
        return {"identity": shown, "standing": "forced",
                "detail": f"activated past the gate by {forced.actor}: {forced.reason}"}
    return {"identity": shown, "standing": "unverified",
            "detail": f"no completed verification of these bytes (props scorers verify {ref})"}

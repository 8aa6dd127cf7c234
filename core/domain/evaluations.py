"""Evaluations: a recorded plan (critics x examples x epochs, ceilings, budget) whose cases
each end in exactly one state.

A plan is a TOML file (see `Plan`). Its cases are the product critics x examples x epochs,
resolved when the evaluation starts: each critic's definition to the digest it names now,
each example to the snapshot version in force now. The plan, the resolved cases (a blob) and
their hash are recorded as `evaluation.started`. Each case has a stable key, and each attempt
of it a run id derived from (evaluation, version, key, attempt): requesting a case is an
idempotent append, so a command killed at any point and started again requests nothing
twice, and running the same plan again requests only what has no result.

A case is, as the log says: waiting (no run yet), running, scored (its run completed and is
graded under the active scorer, or reported nothing), failed (its run's closed failure fact),
excluded (`run.excluded`, with the reason) or, once the evaluation stopped without it,
missing: broken, never dropped. The evaluation is complete only when every case is scored or
excluded.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import tomllib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
import pydantic

from props.core.domain import caps, catalog, definitions, endpoints, streams
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.events import NewEvent, RecordedEvent, validation_problems
from props.core.log.store import EventStore
from props.schema import queries

NAMESPACE = uuid.UUID("6c1f3b8e-2d47-4a59-9e0b-7f3c5a1d2e84")
# The cases one evaluation may hold: each is looked at while it runs, and all of them are one
# blob (globs x critics x epochs could otherwise name millions).
MAX_CASES = 10_000
_Q = queries.load("evaluations")
# (no NUL: PostgreSQL cannot store one, and the API's schema says so)
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200,
                                                 pattern=r"^[^\x00]*$")]


class PlanError(errors.PropsError):
    """The evaluation's plan cannot be read, names what the log does not hold, or changed
    under a name already recorded."""

    exit_code = 65


class PlanNamesNothing(PlanError):
    """The plan names a snapshot, file set or critic definition the log does not hold."""

    exit_code = 66  # EX_NOINPUT: as `runs request` naming a missing definition or snapshot


class PlanNotFound(PlanError):
    """No plan file at the path given."""

    exit_code = 66  # EX_NOINPUT: a file that is not there


class PlanChanged(PlanError):
    """A different plan (or the same one resolving to other digests or snapshot versions)
    under a name already recorded, without asking for a new version."""


class NotYours(PlanError):
    """The evaluation's name was started by another requester (an API token): a token acts
    on its own evaluations only."""

    exit_code = 77  # EX_NOPERM


class BroughtByImport(PlanError):
    """The evaluation's name is one an import brought: another database's history, which
    this one reads but never resumes, drives or takes results from as its own (issue 43)."""


class Critic(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    definition: Name
    model: Name | None = None  # default: the definition's name (a baseline's tool is one)
    ref: Name = "latest"
    # This critic's runs' caps, up to the operator's ceiling (props.core.domain.caps).
    max_events: catalog.EventCap | None = None
    max_bytes: catalog.ByteCap | None = None

    @pydantic.model_serializer(mode="wrap")
    def _without_unset_caps(self, handler: pydantic.SerializerFunctionWrapHandler,
                            ) -> dict[str, Any]:
        """A critic without caps is written as before caps existed: a plan recorded then
        is the same plan now (its hash, `evaluation_starts.prepare`)."""
        return {k: v for k, v in handler(self).items() if k not in _CAPS or v is not None}


_CAPS = ("max_events", "max_bytes")


class Plan(pydantic.BaseModel):
    """`name`, `examples` (snapshot slugs, globs allowed; `SLUG:FILESET` for a file set),
    `epochs`, `max_concurrency`, `budget_usd`, `timeout_seconds` and `[[critic]]` tables."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: catalog.EvaluationName
    examples: list[Annotated[str, pydantic.StringConstraints(
        min_length=1, max_length=300, pattern=r"^[^\x00]*$")]] = \
        pydantic.Field(min_length=1, max_length=1000)
    epochs: int = pydantic.Field(1, ge=1, le=100)
    max_concurrency: int = pydantic.Field(4, ge=1, le=1000)
    budget_usd: float | None = pydantic.Field(None, ge=0, le=1e6, allow_inf_nan=False)
    timeout_seconds: float = pydantic.Field(600, gt=0, le=7 * 86_400, allow_inf_nan=False)
    run_budget_usd: float = pydantic.Field(1.0, ge=0, le=1e6, allow_inf_nan=False)
    critic: list[Critic] = pydantic.Field(min_length=1, max_length=100)


def load_plan(path: Path) -> Plan:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise PlanNotFound(f"no plan file {path}") from exc
    except OSError as exc:
        raise PlanError(f"cannot read the plan {path}: {exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise PlanError(f"{path} is not a TOML plan: {exc}") from exc
    try:
        return Plan.model_validate(doc)
    except pydantic.ValidationError as exc:
        raise PlanError(f"{path}: {validation_problems(exc)}") from exc


@dataclasses.dataclass(frozen=True)
class Case:
    definition: str
    digest: str
    model: str
    snapshot: str
    snapshot_version: int
    files_hash: str | None
    file_set: str | None
    epoch: int
    max_events: int | None = None  # the plan's caps for its critic (not part of its key)
    max_bytes: int | None = None

    @property
    def key(self) -> str:
        """Stable across runs of the same plan: what `requested only once` is keyed by."""
        return (f"{self.definition}@{self.digest}|{self.model}|{self.snapshot}"
                f"@{self.snapshot_version}|{self.files_hash or '*'}|{self.epoch}")


async def resolve(store: EventStore, plan: Plan) -> list[Case]:
    """The plan's cases as the log has its critics and snapshots now."""
    known = {slug: h for slug, h in (await specimen_sync.history(store)).items()
             if not h.retired}
    examples: list[tuple[specimen_sync.SnapshotHistory, str | None]] = []
    for pattern in plan.examples:
        slug_pattern, _, named_set = pattern.partition(":")
        matched = sorted(s for s in known if fnmatch.fnmatchcase(s, slug_pattern))
        if not matched:
            raise PlanNamesNothing(f"example {pattern!r} names no snapshot in the log (props "
                            f"specimens sync first; known: {', '.join(sorted(known)) or 'none'})")
        examples += [(known[s], named_set or None) for s in matched]
    cases = []
    for critic in plan.critic:
        found = await definitions.resolve(store, "critic", critic.definition, critic.ref)
        if found is None:
            raise PlanNamesNothing(str(definitions.missing_definition(
                "critic", critic.definition, critic.ref)))
        try:
            caps.check_plan(await endpoints.grant_of(store, "critic", found.digest),
                            critic.definition, critic.max_events, critic.max_bytes)
        except caps.CapRefused as exc:
            raise PlanError(f"{plan.name}: {exc}") from None
        for snapshot_history, file_set in examples:
            snap = snapshot_history.latest
            files_hash = None
            if file_set is not None:
                sets = [fs for fs in snap.ground_truth.file_sets if fs.name == file_set]
                if not sets:
                    raise PlanNamesNothing(f"{snap.slug} has no file set {file_set!r}")
                files_hash = sets[0].files_hash
            for epoch in range(1, plan.epochs + 1):
                cases.append(Case(critic.definition, found.digest,
                                  critic.model or critic.definition, snap.slug, snap.version,
                                  files_hash, file_set, epoch, critic.max_events,
                                  critic.max_bytes))
                if len(cases) > MAX_CASES:
                    raise PlanError(f"{plan.name}: more than {MAX_CASES:,} cases (critics x "
                                    f"examples x epochs): split it into several evaluations")
    return cases


def canonical(plan: Plan, cases: list[Case]) -> bytes:
    """The plan and its resolved cases as recorded (their sha256 is the plan's)."""
    return orjson.dumps({"plan": plan.model_dump(mode="json"),
                         "cases": [{k: v for k, v in dataclasses.asdict(c).items()
                                    if k not in _CAPS or v is not None} for c in cases]},
                        option=orjson.OPT_SORT_KEYS)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    name: str
    version: int
    plan: Plan
    cases: list[Case]
    requester: str | None = None  # the token that started it (the API's), else None
    nonce: uuid.UUID | None = None  # evaluation.started's (None: recorded before it had one)
    imported: bool = False  # brought by an import: its runs are the file's, not this log's
    origin: str | None = None  # the archive an import brought it from

    def run_id(self, case: Case, attempt: int = 0) -> uuid.UUID:
        """The run of `case`'s `attempt`: derived (a resumed evaluation finds its runs again)
        from the version's random nonce, so nothing outside can take the id first."""
        if self.nonce is None:  # a version recorded before nonces: the ids it used
            return uuid.uuid5(NAMESPACE, f"{self.name}:{self.version}:{case.key}:{attempt}")
        return uuid.uuid5(self.nonce, f"{case.key}:{attempt}")


async def _started(store: EventStore, name: str,
                   ) -> list[tuple[catalog.EvaluationStarted, dict[str, object]]]:
    return [(r.event, r.metadata) for r in await store.read_stream(streams.evaluation(name))
            if isinstance(r.event, catalog.EvaluationStarted)]


async def history(store: EventStore, name: str) -> list[catalog.EvaluationStarted]:
    return [e for e, _ in await _started(store, name)]


async def recorded(store: EventStore, name: str) -> Evaluation:
    """The evaluation's latest version as recorded (its cases as resolved then)."""
    versions = await _started(store, name)
    if not versions:
        raise errors.NotFound(f"no evaluation named {name} (props eval list)")
    last, meta = versions[-1]
    doc = orjson.loads(await store.get_blob(last.cases_sha256))
    requester = meta.get("requested_by")
    return Evaluation(name, last.version, Plan.model_validate(doc["plan"]),
                      [Case(**c) for c in doc["cases"]],
                      requester if isinstance(requester, str) else None, last.nonce,
                      imported=any("origin" in m for _, m in versions),
                      origin=_archive(meta.get("origin")))


def _archive(origin: object) -> str | None:
    """The archive an import brought an event from (its metadata's `origin`), if any."""
    archive = origin.get("archive") if isinstance(origin, dict) else None
    return archive if isinstance(archive, str) else None


async def require(store: EventStore, name: str) -> None:
    """NotFound unless an evaluation `name` is recorded (its stream exists: one index
    lookup, none of its versions read)."""
    if not await store.existing_streams([streams.evaluation(name)]):
        raise errors.NotFound(f"no evaluation named {name} (props eval list)")


async def runs_of(store: EventStore, name: str) -> list[uuid.UUID]:
    """Every run the evaluation requested (each version and attempt)."""
    return [r[0] for r in await store.sql.fetch(_Q["runs"], name)]


async def export_streams(store: EventStore, name: str) -> tuple[tuple[str, ...],
                                                               tuple[str, ...]]:
    """The streams an export of the evaluation holds so that the file reads alone, and the
    prefixes of those that are many: its own, its runs' (their grades' and judges'), the
    snapshots they ran on, the definitions and the scorers."""
    await require(store, name)
    runs = await runs_of(store, name)
    run_streams = [streams.run(r) for r in runs]
    slugs = [r[0] for r in await store.sql.fetch(_Q["snapshots"], run_streams)]
    ids = (streams.evaluation(name), *run_streams, *(streams.snapshot(s) for s in slugs),
           streams.definition("critic"), streams.definition("grader"))
    prefixes = (*(streams.grading(r, "") for r in runs), *(streams.judge(r, "") for r in runs),
                streams.scorer(""))
    return ids, prefixes


async def names(store: EventStore) -> list[str]:
    return [r[0] for r in await store.sql.fetch(_Q["names"])]


# -- where each case stands --------------------------------------------------------------------

State = Literal["waiting", "running", "scored", "failed", "excluded", "missing"]
DONE: frozenset[str] = frozenset({"scored", "excluded"})  # a result: complete when all are


@dataclasses.dataclass(frozen=True)
class CaseState:
    case: Case
    state: State
    run_id: uuid.UUID | None  # its latest attempt's run
    attempts: int
    cost_usd: float
    failure: catalog.Failure | None = None
    reason: str | None = None  # why excluded


async def states_of(store: EventStore, ev: Evaluation, cases: Sequence[Case],
                    scorer: str | None, stopped: bool = False) -> list[CaseState]:
    """Where each of `cases` stands, from its runs' streams (`stopped`: the evaluation ended,
    so a case with no result is missing). A few queries for all of them, not a few each:
    every case's next attempt is looked for at once, until no case has one more."""
    latest: dict[str, tuple[int, list[RecordedEvent]]] = {}
    looking, attempt = list(cases), 0
    while looking:
        ids = {streams.run(ev.run_id(c, attempt)): c for c in looking}
        found = await store.read_streams(list(ids))
        looking = [c for sid, c in ids.items() if sid in found]
        latest.update((ids[sid].key, (attempt + 1, records)) for sid, records in found.items())
        attempt += 1
    graded: set[str] = set()
    if scorer is not None:
        wanting = [streams.grading(ev.run_id(c, latest[c.key][0] - 1), scorer)
                   for c in cases if c.key in latest]
        graded = await store.existing_streams(wanting) if wanting else set()
    out = []
    for c in cases:
        if c.key not in latest:
            out.append(CaseState(c, "missing" if stopped else "waiting", None, 0, 0.0))
            continue
        attempts, records = latest[c.key]
        run_id = ev.run_id(c, attempts - 1)
        if not ev.imported and any(r.imported for r in records):
            # A run an import brought under this evaluation's id: never this log's result.
            out.append(CaseState(c, "failed", run_id, attempts, 0.0, IMPORTED_RUN))
            continue
        done = scorer is not None and streams.grading(run_id, scorer) in graded
        out.append(_state(c, run_id, attempts, [r.event for r in records], done, stopped))
    return out


IMPORTED_RUN = catalog.Failure.of("run", "brought_by_import")


def _state(case: Case, run_id: uuid.UUID, attempts: int, events: Sequence[object],
           graded: bool, stopped: bool) -> CaseState:
    """A case's state from its latest run's events (`graded`: its grading stream under the
    scorer exists)."""
    finished = next((e for e in events if isinstance(e, catalog.RunFinished)), None)
    excluded = next((e for e in events if isinstance(e, catalog.RunExcluded)), None)
    cost = finished.cost_usd if finished else sum(
        e.cost_usd for e in events if isinstance(e, catalog.LlmResponded))
    if excluded is not None:
        return CaseState(case, "excluded", run_id, attempts, cost, reason=excluded.reason)
    if finished is None:
        return CaseState(case, "missing" if stopped else "running", run_id, attempts, cost)
    if finished.status != "completed":
        failure = finished.failure or catalog.Failure.of("run", finished.status)
        return CaseState(case, "failed", run_id, attempts, cost, failure)
    issues = any(isinstance(e, catalog.IssueReported) for e in events)
    state: State = "scored" if graded or not issues else ("missing" if stopped else "running")
    return CaseState(case, state, run_id, attempts, cost)


def case_json(s: CaseState) -> dict[str, object]:
    """A case and where it stands, as `props eval show --json` and the API give it."""
    return {"key": s.case.key, "definition": s.case.definition, "model": s.case.model,
            "snapshot": s.case.snapshot, "file_set": s.case.file_set, "epoch": s.case.epoch,
            "state": s.state, "run_id": str(s.run_id) if s.run_id else None,
            "attempts": s.attempts, "cost_usd": s.cost_usd,
            "failure": s.failure.model_dump() if s.failure else None, "reason": s.reason}


async def request(store: EventStore, ev: Evaluation, case: Case, attempt: int,
                  budget_usd: float | None = None) -> uuid.UUID:
    """Request attempt `attempt` of `case` (idempotent: its run id is the case's), with
    the plan's run budget or `budget_usd` (what is left of the evaluation's) if lower."""
    run_id = ev.run_id(case, attempt)
    budget = ev.plan.run_budget_usd if budget_usd is None else min(budget_usd,
                                                                   ev.plan.run_budget_usd)
    event = catalog.RunRequested(
        run_id=run_id, agent_type="critic", definition=case.definition,
        definition_ref=case.digest,
        example=catalog.Example(snapshot=case.snapshot, files_hash=case.files_hash),
        model=case.model, timeout_seconds=ev.plan.timeout_seconds,
        budget_usd=budget, requested_by=f"eval:{ev.name}@{ev.version}",
        max_events=case.max_events, max_bytes=case.max_bytes)
    meta: dict[str, object] = {"evaluation": ev.name, "evaluation_version": ev.version,
                               "case": case.key, "attempt": attempt}
    if ev.requester:
        meta["requester"] = ev.requester  # its turn in the launcher's queue is theirs
    await store.append(streams.run(run_id), [NewEvent(
        event, uuid.uuid5(run_id, "run.requested"), meta)])
    return run_id


async def end(store: EventStore, ev: Evaluation, outcome: catalog.EvaluationOutcome,
              states: list[CaseState]) -> None:
    """Record how this drive left the evaluation. The same ending again (a rerun of a
    complete evaluation, which requests nothing) is the same fact: it appends nothing."""
    count = {s: sum(1 for c in states if c.state == s) for s in ("scored", "failed",
                                                                 "excluded", "missing")}
    event = catalog.EvaluationEnded(
        name=ev.name, version=ev.version, outcome=outcome, scored=count["scored"],
        failed=count["failed"], excluded=count["excluded"], missing=count["missing"],
        cost_usd=sum(c.cost_usd for c in states))
    runs = ",".join(sorted(str(c.run_id) for c in states if c.run_id is not None))
    await store.append(streams.evaluation(ev.name), [NewEvent(event, uuid.uuid5(
        NAMESPACE, f"ended:{event.model_dump_json()}:{runs}"))])


def max_connections(definition: catalog.DefinitionPushed) -> int | None:
    """A model's own ceiling, from its definition's config (`max_connections`)."""
    value = definition.config.get("max_connections")
    return value if isinstance(value, int) and value >= 1 else None

"""A scorer verified before it grades the headline: a frozen cohort replayed under the
candidate beside the scorer it would replace, without changing which one is active.

Every reported issue of the cohort's runs (its candidates for credit) lands in exactly one
bucket: unchanged, newly credited (the candidate credits a defect the other did not),
newly uncredited, credited to another defect, or diverged with a reason (the judge could
not be reached, its answer could not be read, the run cannot be scored, the grades the
other scorer recorded are of another version). None is dropped: the event that records the
outcome (`scorer.verified`) refuses buckets that do not add up to the cohort's issues.

A candidate that asks a model records each run's verdicts (`verification.replayed`, its
answers as blobs) as soon as it has them: a verification killed in the middle, run again,
asks only what it has no answer for. It is `completed` only when every run was replayed (and
the labelled cases measured); `partial` when the model could not be reached for some,
`failed` when for all. The labelled cases (tools/bundled/grading_cases, or a folder of your
own) give the candidate's accuracy, people's verdicts in the cohort its agreement with
people, each with the cluster bootstrap's interval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync
from props.core.log import stopping
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import (
    candidates,
    cohorts,
    evaluation,
    gate,
    identity,
    intervals,
    registration,
    scorers,
    verdicts,
)
from props.core.scoring.llm_judge import JudgeError
from props.core.scoring.rescoring import (
    RunRecord,
    Selection,
    ground_truth_for,
    parse_issues,
    selected_runs,
    unscorable_reason,
)
from props.core.scoring.scorable import parsed_only

_NAMESPACE = uuid.UUID("9d0c3a52-61b4-4f1e-b7a8-53c2e4f0d917")
Bucket = catalog.Bucket
BUCKETS: tuple[Bucket, ...] = ("unchanged", "newly credited", "newly uncredited",
                               "credited elsewhere", "diverged")
Said = scorers.Match | str  # a verdict, or why there is none


@dataclasses.dataclass(frozen=True)
class Labels:
    """Labelled grading cases, and the hash of the files they were read from."""

    cases: list[evaluation.Case]
    sha256: str

    @classmethod
    def load(cls, folder: Path) -> Labels:
        digest = hashlib.sha256()
        for path in sorted(folder.glob("*.toml")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return cls(evaluation.load(folder), digest.hexdigest())


@dataclasses.dataclass(frozen=True)
class IssueOutcome:
    run_id: uuid.UUID
    issue_id: str
    bucket: Bucket
    before: str  # the replaced scorer's word, as a person reads it
    after: str  # the candidate's
    reason: catalog.DivergenceReason | None = None
    detail: str = ""


@dataclasses.dataclass
class Verification:
    event: catalog.ScorerVerified
    issues: list[IssueOutcome]
    asked: int = 0  # runs the model was asked about by this call (resumed ones not)


def verification_id(candidate: str, against: str | None, cohort_id: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{candidate}:{against or '-'}:{cohort_id}")


def _word(said: Said | None) -> str:
    if said is None:
        return "-"
    if isinstance(said, str):
        return f"unscorable ({said})"
    if said.tp_id is not None:
        return f"TP {said.tp_id}#{said.tp_occurrence}" + (
            "" if said.grade >= scorers.FIND_GRADE else f" (partial {said.grade:g})")
    return f"FP {said.fp_id}" if said.fp_id is not None else "none"


def _credit(m: scorers.Match) -> tuple[str, int | None] | None:
    return (m.tp_id, m.tp_occurrence) if m.tp_id is not None \
        and m.grade >= scorers.FIND_GRADE else None


def bucket(before: scorers.Match, after: scorers.Match) -> Bucket:
    was, now = _credit(before), _credit(after)
    if was == now:
        return "unchanged"
    if was is None:
        return "newly credited"
    return "newly uncredited" if now is None else "credited elsewhere"


async def _recorded(store: EventStore, s: scorers.Scorer, run: RunRecord, gt_hash: str
                    ) -> dict[str, Said] | str:
    """What a scorer that asks a model recorded for the run against this ground truth
    (never asked again here), or why it has nothing usable."""
    found: dict[str, Said] = {}
    other = False
    for rec in await store.read_stream(streams.grading(run.run_id, scorers.ref(s))):
        e = rec.event
        if not isinstance(e, catalog.GradeEmitted | catalog.GradesEmitted
                          | catalog.GradesUnscorable) or e.scorer.ground_truth_hash != gt_hash:
            continue
        if e.scorer.code_hash != s.code_hash:
            other = True
            continue
        if isinstance(e, catalog.GradeEmitted):
            found[e.critique_issue_id] = scorers.Match(e.tp_id, e.tp_occurrence, e.fp_id,
                                                       e.grade)
        elif isinstance(e, catalog.GradesEmitted):
            found.update({g.issue_id: scorers.Match(g.tp_id, g.tp_occurrence, g.fp_id,
                                                    g.grade) for g in e.grades})
        else:
            found.update({i.issue_id: i.reason for i in e.issues})
    if found:
        return found
    return "version mismatch" if other else "run unscorable"


def _from_replayed(e: catalog.VerificationReplayed) -> dict[str, Said]:
    return {v.issue_id: v.unscorable if v.unscorable is not None else scorers.Match(
        v.tp_id, v.tp_occurrence, v.fp_id, v.grade) for v in e.verdicts}


def _replayed_event(vid: uuid.UUID, ident: str, run: RunRecord, gt_hash: str,
                    said: verdicts.RunVerdicts) -> catalog.VerificationReplayed:
    answers = [c for c in said.calls if isinstance(c, catalog.LlmResponded)]
    rows = [catalog.IssueVerdict(issue_id=i, tp_id=m.tp_id, tp_occurrence=m.tp_occurrence,
                                 fp_id=m.fp_id, grade=m.grade)
            for i, m in sorted(said.matches.items())]
    rows += [catalog.IssueVerdict(issue_id=i, unscorable=r[:500])
             for i, r in sorted(said.unscorable.items())]
    return catalog.VerificationReplayed(
        verification_id=vid, run_id=run.run_id, identity_hash=ident, ground_truth_hash=gt_hash,
        verdicts=rows, answers=[a.response_sha256 for a in answers],
        tokens_in=sum(a.tokens_in for a in answers),
        tokens_out=sum(a.tokens_out for a in answers),
        cost_usd=sum(a.cost_usd or 0.0 for a in answers),
        model_ms=sum(a.latency_ms or 0.0 for a in answers))


@dataclasses.dataclass
class _Run:
    """One run of the cohort as the verification saw it."""

    run: RunRecord
    before: dict[str, Said] | str  # per issue, or why none
    after: dict[str, Said] | str
    reason: catalog.DivergenceReason | None = None  # the whole run's, if it diverged
    detail: str = ""


class _Replay:
    """The cohort's runs under both scorers (the candidate's model asked only where the
    verification's stream has no answer yet)."""

    def __init__(self, store: EventStore, candidate: scorers.Scorer, against: scorers.Scorer,
                 vid: uuid.UUID) -> None:
        self.store, self.candidate, self.against, self.vid = store, candidate, against, vid
        self.ident = identity.identity(candidate)
        self.replayed: dict[uuid.UUID, catalog.VerificationReplayed] = {}
        self.asked = 0
        self.unreachable = 0

    async def resume(self) -> list[catalog.VerificationLabelled]:
        labelled = []
        for rec in await self.store.read_stream(streams.verification(self.vid)):
            if isinstance(rec.event, catalog.VerificationReplayed):
                self.replayed[rec.event.run_id] = rec.event
            elif isinstance(rec.event, catalog.VerificationLabelled):
                labelled.append(rec.event)
        return labelled

    async def side(self, s: scorers.Scorer, run: RunRecord, snapshot: catalog.SnapshotSynced,
                   issues: dict[str, list[catalog.Location]], mine: bool
                   ) -> dict[str, Said] | str:
        grader = verdicts.of(s)
        if not grader.asks_a_model:
            never = candidates.never(run.definition, run.rationales) & issues.keys()
            said = await grader.verdicts(None, run.run_id, issues, run.rationales,
                                         snapshot.ground_truth, frozenset(never))
            return {**said.matches, **said.unscorable}
        if not mine:
            return await _recorded(self.store, s, run, snapshot.ground_truth_hash)
        if (done := self.replayed.get(run.run_id)) is not None:
            if done.ground_truth_hash != snapshot.ground_truth_hash:
                return "version mismatch"
            return _from_replayed(done)
        if not issues:
            return {}
        try:
            said = await grader.verdicts(self.store, run.run_id, issues, run.rationales,
                                         snapshot.ground_truth)
        except JudgeError as exc:
            self.unreachable += 1
            return f"judge unreachable: {exc}"
        self.asked += 1
        event = _replayed_event(self.vid, self.ident, run, snapshot.ground_truth_hash, said)
        await self.store.append(streams.verification(self.vid), [NewEvent(
            event, uuid.uuid5(self.vid, f"replayed:{run.run_id}"))])
        self.replayed[run.run_id] = event
        return {**said.matches, **said.unscorable}

    async def run(self, run: RunRecord, known: dict[str, specimen_sync.SnapshotHistory]
                  ) -> _Run:
        snapshot = ground_truth_for(run, known, "at-run")
        parsed = parse_issues(run)
        if (why := unscorable_reason(run, snapshot, parsed)) is not None:
            return _Run(run, why, why, "run unscorable", why)
        assert snapshot is not None
        issues = parsed_only(parsed)
        after = await self.side(self.candidate, run, snapshot, issues, mine=True)
        before = await self.side(self.against, run, snapshot, issues, mine=False)
        for said, whose in ((after, "candidate"), (before, "the scorer replaced")):
            if isinstance(said, str):
                reason: catalog.DivergenceReason = "judge unreachable" \
                    if said.startswith("judge unreachable") else "version mismatch" \
                    if said == "version mismatch" else "run unscorable"
                return _Run(run, before, after, reason, f"{whose}: {said}")
        return _Run(run, before, after)


def _outcomes(r: _Run) -> list[IssueOutcome]:
    out = []
    for issue_id in sorted(r.run.issues):
        before = r.before.get(issue_id) if isinstance(r.before, dict) else None
        after = r.after.get(issue_id) if isinstance(r.after, dict) else None
        if r.reason is not None or before is None or after is None:
            out.append(IssueOutcome(r.run.run_id, issue_id, "diverged", _word(before),
                                    _word(after), r.reason or "run unscorable",
                                    r.detail or "an issue without a verdict"))
        elif isinstance(before, str) or isinstance(after, str):
            out.append(IssueOutcome(r.run.run_id, issue_id, "diverged", _word(before),
                                    _word(after), "judge answer unreadable",
                                    str(after if isinstance(after, str) else before)))
        else:
            out.append(IssueOutcome(r.run.run_id, issue_id, bucket(before, after),
                                    _word(before), _word(after)))
    return out


def _scope(run: RunRecord, snapshot: catalog.SnapshotSynced) -> set[str]:
    scopes = {s.files_hash: s for s in snapshot.ground_truth.scopes}
    found = scopes.get(run.files_hash) or scopes.get(None)
    return set(found.occurrences) if found else set()


def _critics(replayed: list[_Run], known: dict[str, specimen_sync.SnapshotHistory]
             ) -> list[catalog.CriticChange]:
    """Recall per (model, definition) before and after, over the completed runs every issue
    of which has a verdict on both sides; the difference's paired interval over examples."""
    sums: dict[tuple[str, str], dict[tuple[str, str], list[float]]] = {}
    runs: Counter[tuple[str, str]] = Counter()
    for r in replayed:
        if r.run.status != "completed" or r.reason is not None \
                or not isinstance(r.before, dict) or not isinstance(r.after, dict) \
                or any(isinstance(v, str) for v in (*r.before.values(), *r.after.values())):
            continue
        snapshot = ground_truth_for(r.run, known, "at-run")
        assert snapshot is not None
        scope = _scope(r.run, snapshot)
        key = (r.run.model, r.run.definition)
        runs[key] += 1
        totals = sums.setdefault(key, {}).setdefault((r.run.snapshot, r.run.files_hash),
                                                     [0.0, 0.0, 0.0, 0.0])
        for side, at in ((r.before, 0), (r.after, 2)):
            found = {f"{c[0]}#{c[1]}" for m in side.values()
                     if isinstance(m, scorers.Match) and (c := _credit(m))}
            totals[at] += len(found & scope)
            totals[at + 1] += len(scope)
    out = []
    for (model, definition), examples in sorted(sums.items()):
        pairs = [((e[0], e[1]), (e[2], e[3])) for _, e in sorted(examples.items())]
        diff = intervals.paired_difference(pairs)
        before = sum(p[0][0] for p in pairs), sum(p[0][1] for p in pairs)
        after = sum(p[1][0] for p in pairs), sum(p[1][1] for p in pairs)
        out.append(catalog.CriticChange(
            model=model[:200], definition=definition[:200], runs=runs[(model, definition)],
            recall_before=before[0] / before[1] if before[1] else None,
            recall_after=after[0] / after[1] if after[1] else None,
            delta=diff.delta, low=diff.low, high=diff.high))
    return out


def _agreement(clusters: list[tuple[float, float]]) -> catalog.Agreement | None:
    issues = int(sum(n for _, n in clusters))
    if not issues:
        return None
    agreed = int(sum(k for k, _ in clusters))
    low, high = intervals.ratio_interval(clusters)
    return catalog.Agreement(issues=issues, agreed=agreed, share=agreed / issues, low=low,
                             high=high)


async def _people(store: EventStore, replayed: list[_Run]) -> catalog.Agreement | None:
    """The candidate's verdicts beside people's (`grade.reviewed`, the newest per issue)
    on the issues both gave one: the clusters are runs."""
    if not replayed:
        return None
    ids = [streams.review(r.run.run_id) for r in replayed]
    reviews = await store.read_streams(ids)
    clusters = []
    for r in replayed:
        said: dict[str, catalog.GradeReviewed] = {}
        for rec in reviews.get(streams.review(r.run.run_id), []):
            if isinstance(rec.event, catalog.GradeReviewed):
                said[rec.event.critique_issue_id] = rec.event
        if not said or not isinstance(r.after, dict):
            continue
        k = n = 0
        for issue_id, person in said.items():
            mine = r.after.get(issue_id)
            if isinstance(mine, scorers.Match):
                n += 1
                k += (mine.tp_id, mine.tp_occurrence, mine.fp_id) == (
                    person.tp_id, person.tp_occurrence, person.fp_id)
        if n:
            clusters.append((float(k), float(n)))
    return _agreement(clusters)


async def _labels(store: EventStore, replay: _Replay, labels: Labels | None,
                  done: list[catalog.VerificationLabelled]) -> catalog.Agreement | str | None:
    """The candidate on the labelled cases (recorded once per verification); a string: why
    they could not be measured now."""
    if labels is None:
        return None
    found = next((e for e in done if e.cases_sha256 == labels.sha256), None)
    if found is None:
        scores, confusion = [], Counter[str]()
        try:
            for case in labels.cases:
                result = await evaluation.evaluate(replay.candidate, [case])
                right = sum(result.cells[c] for c in evaluation.RIGHT)
                scores.append(catalog.CaseScore(case_id=case.id[:200], issues=result.issues,
                                                right=right))
                confusion.update(result.cells)
        except JudgeError as exc:
            return f"judge unreachable on the labelled cases: {exc}"
        found = catalog.VerificationLabelled(
            verification_id=replay.vid, identity_hash=replay.ident,
            cases_sha256=labels.sha256, scores=scores, confusion=dict(confusion))
        await store.append(streams.verification(replay.vid), [NewEvent(
            found, uuid.uuid5(replay.vid, f"labelled:{labels.sha256}"))])
    return _agreement([(float(c.right), float(c.issues)) for c in found.scores])


async def verify(store: EventStore, candidate: scorers.Scorer, against: scorers.Scorer,
                 cohort: cohorts.Cohort, labels: Labels | None, *,
                 selected: Callable[[int], None] | None = None,
                 progress: Callable[[int], None] | None = None,
                 rules: gate.Policy | None = None) -> Verification:
    """Replay `cohort` under `candidate` beside `against` and record the outcome
    (`scorer.verified`, in the candidate's stream). The active scorer is not changed; the
    candidate is registered (as a rescore would) so the log knows what was verified.
    `rules`: the policy it is held to (default: the operator's, gate.policy())."""
    rules = rules or gate.policy()
    await registration.ensure_registered(store, candidate)
    ident = identity.identity(candidate)
    against_ident = identity.identity(against)
    vid = verification_id(ident, against_ident, cohort.spec.cohort_id)
    replay = _Replay(store, candidate, against, vid)
    labelled = await replay.resume()
    known = await specimen_sync.history(store)
    runs = await selected_runs(store, Selection(run_ids=cohort.run_ids)) \
        if cohort.run_ids else []
    if selected:
        selected(len(runs) + (len(labels.cases) if labels else 0))
    seen: list[_Run] = []
    try:
        for run in runs:
            seen.append(await replay.run(run, known))
            if progress:
                progress(1)
        measured = await _labels(store, replay, labels, labelled)
    except anyio.get_cancelled_exc_class():  # stopped: what it reached is said, then it stops
        with stopping.shield("recording the verification's stop", at_most=30):
            await _record(store, replay, cohort, seen, [o for r in seen for o in _outcomes(r)],
                          None, against, against_ident, rules, cancelled=True)
        raise
    if progress and labels:
        progress(len(labels.cases))
    outcomes = [o for r in seen for o in _outcomes(r)]
    return Verification(await _record(store, replay, cohort, seen, outcomes, measured,
                                      against, against_ident, rules), outcomes, replay.asked)


def _status(replay: _Replay, seen: list[_Run], measured: Any) -> catalog.VerificationStatus:
    """completed: every run replayed and the labels measured; failed: the model answered
    nothing; partial: in between. (A cancelled one covers the runs it reached only.)"""
    missing = replay.unreachable + isinstance(measured, str)
    if not missing:
        return "completed"
    answered = len(replay.replayed) + isinstance(measured, catalog.Agreement)
    return "partial" if answered else "failed"


async def _record(store: EventStore, replay: _Replay, cohort: cohorts.Cohort,
                  seen: list[_Run], outcomes: list[IssueOutcome], measured: Any,
                  against: scorers.Scorer, against_ident: str, rules: gate.Policy, *,
                  cancelled: bool = False) -> catalog.ScorerVerified:
    bucketed = _bucketed(replay.vid, outcomes)
    if bucketed:
        await store.append(streams.verification(replay.vid), bucketed)
    counts = Counter(o.bucket for o in outcomes)
    diverged = Counter(o.reason for o in outcomes if o.reason is not None)
    spent = [replay.replayed[r.run.run_id] for r in seen if r.run.run_id in replay.replayed]
    s = replay.candidate
    event = catalog.ScorerVerified(
        verification_id=replay.vid, name=s.name, version=s.version,
        identity_hash=replay.ident, code_hash=s.code_hash, against=scorers.ref(against),
        against_identity=against_ident, cohort=cohort.spec,
        status="cancelled" if cancelled else _status(replay, seen, measured),
        candidates=len(outcomes),
        unchanged=counts["unchanged"], newly_credited=counts["newly credited"],
        newly_uncredited=counts["newly uncredited"],
        credited_elsewhere=counts["credited elsewhere"],
        diverged=[catalog.Diverged(reason=k, issues=n) for k, n in sorted(diverged.items())],
        replayed_runs=sum(1 for r in seen if r.reason is None),
        critics=_critics(seen, await specimen_sync.history(store)),
        labels=measured if isinstance(measured, catalog.Agreement) else None,
        people=await _people(store, seen),
        tokens_in=sum(e.tokens_in for e in spent), tokens_out=sum(e.tokens_out for e in spent),
        cost_usd=sum(e.cost_usd for e in spent), model_ms=sum(e.model_ms for e in spent))
    short_of = [f"the verification is {event.status}"] if event.status != "completed" \
        else rules.failures(event)
    event = event.model_copy(update={"passed": not short_of,
                                     "short_of": [f[:500] for f in short_of[:20]]})
    # The same outcome recorded twice is one event: its id is its content's.
    body = event.model_dump_json(exclude={"verification_id"}).encode()
    event_id = uuid.uuid5(replay.vid, "verified:" + hashlib.sha256(body).hexdigest())
    await store.append(streams.scorer(s.name), [NewEvent(event, event_id)])
    return event


def _bucketed(vid: uuid.UUID, outcomes: list[IssueOutcome]) -> list[NewEvent]:
    """Each run's issues with their buckets, an event a run (`verification.bucketed`): the
    same outcome recorded again is the same event (its id is its content's)."""
    by_run: dict[uuid.UUID, list[catalog.IssueBucketed]] = {}
    for o in outcomes:
        by_run.setdefault(o.run_id, []).append(catalog.IssueBucketed(
            issue_id=o.issue_id, bucket=o.bucket, before=o.before[:200], after=o.after[:200],
            reason=o.reason, detail=o.detail[:500]))
    out = []
    for run_id, issues in by_run.items():
        event = catalog.VerificationBucketed(verification_id=vid, run_id=run_id, issues=issues)
        body = event.model_dump_json().encode()
        out.append(NewEvent(event, uuid.uuid5(vid, "bucketed:" + hashlib.sha256(body).hexdigest())))
    return out


def outcomes_json(v: Verification) -> dict[str, Any]:
    """The verification, and each issue's bucket (the runs behind each)."""
    return {**v.event.model_dump(mode="json"),
            "issues": [{**dataclasses.asdict(o), "run_id": str(o.run_id)} for o in v.issues]}

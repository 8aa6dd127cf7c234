"""Re-scoring recorded runs under a scorer version (the comparison of two is `comparison`).

Re-scoring reads what was recorded (the runs' reported issues, the ground truth synced in the
log) and appends grades to the scorer version's own streams (`grading-<run>-<name>@<n>`),
never touching another version's. Event ids derive from (run, issue, scorer, ground truth),
so a second identical rescore appends nothing and a crashed one resumes by running again.
Every selected run ends in exactly one place: graded, or unscorable with a named reason.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

import anyio.lowlevel

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync
from props.core.log import bulk, errors
from props.core.log.events import Event, NewEvent
from props.core.log.store import AppendResult, EventStore
from props.core.scoring import (
    candidates,
    chance_runs,
    grade_ids,
    registration,
    scorers,
    server_grading,
    verdicts,
)
from props.core.scoring.llm_judge import JudgeError

# What a run's issues are to a scorer, by the names callers have always used here.
from props.core.scoring.scorable import FINISHED as FINISHED
from props.core.scoring.scorable import parse_issues as parse_issues
from props.core.scoring.scorable import parsed_only
from props.core.scoring.scorable import reason_kind as reason_kind
from props.core.scoring.scorable import run_unscorable_reason as run_unscorable_reason
from props.core.scoring.scorable import unscorable_reason as unscorable_reason
from props.schema import queries

_Q = queries.load("rescoring")
GroundTruthChoice = Literal["at-run", "latest"]
FLUSH_RUNS = 25
FLUSH_GRADES = 5000
SERVER_CHUNK_RUNS = 250
SERVER_MIN_CHUNK_RUNS = 20


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which recorded critic runs (all filters combine; nothing set means nothing selected
    unless `everything`)."""

    run_ids: Sequence[uuid.UUID] | None = None
    since: datetime | None = None
    until: datetime | None = None
    model: str | None = None
    definition: str | None = None
    snapshot: str | None = None
    everything: bool = False

    def check(self) -> None:
        if not self.everything and not any(
            (self.run_ids, self.since, self.until, self.model, self.definition, self.snapshot)
        ):
            raise errors.PropsError(
                "select runs (--run, --since, --until, --model, --definition, --snapshot) "
                "or say --all"
            )

    def args(self) -> tuple[Any, ...]:
        return (list(self.run_ids) if self.run_ids else None, self.since, self.until,
                self.model, self.definition, self.snapshot)


@dataclasses.dataclass
class RunRecord:
    run_id: uuid.UUID
    status: str
    snapshot: str
    files_hash: str
    requested_at: datetime
    model: str
    definition: str
    # Brought by an import (its stream began in an import): graded on its file's snapshot
    # versions too; a run of this database's own never is (SnapshotHistory.foreign).
    imported: bool = False
    issues: dict[str, Any] = dataclasses.field(default_factory=dict)  # issue id -> locations
    rationales: dict[str, str] = dataclasses.field(default_factory=dict)  # for LLM judges


_SELECT_RUNS = queries.typed("rescoring", "select_runs", RunRecord)


async def selected_runs(store: EventStore, selection: Selection, *,
                        issues: bool = True) -> list[RunRecord]:
    """The selected critic runs, from the projections, with their issues if `issues`."""
    selection.check()
    runs = await store.sql.rows(_SELECT_RUNS, *selection.args())
    if issues:
        await with_issues(store, runs)
    return runs


async def with_issues(store: EventStore, runs: Sequence[RunRecord]) -> None:
    """Read the issues of `runs` (and their rationales) into them, from the projections."""
    by_id = {r.run_id: r for r in runs}
    ids = list(by_id)
    for start in range(0, len(ids), 5000):
        for r in await store.sql.fetch(_Q["issues_of"], ids[start:start + 5000]):
            by_id[r["run_id"]].issues[r["issue_id"]] = r["locations"]
            by_id[r["run_id"]].rationales[r["issue_id"]] = r["rationale"] or ""


def ground_truth_for(run: RunRecord, known: dict[str, specimen_sync.SnapshotHistory],
                     choice: GroundTruthChoice) -> catalog.SnapshotSynced | None:
    """The snapshot version a run is scored against: the one current when it was requested
    (default), or the latest."""
    history = known.get(run.snapshot)
    if history is None or not history.versions:
        return None
    if choice == "latest":
        return history.latest_for(own=not run.imported)
    return history.in_force_at(run.requested_at, own=not run.imported)


def _grades(s: scorers.Scorer, run: RunRecord, snapshot: catalog.SnapshotSynced,
            matches: dict[str, scorers.Match]) -> list[catalog.GradeEmitted]:
    return [scorers.grade_event(s, run.run_id, issue_id, matches[issue_id],
                                snapshot.ground_truth_hash) for issue_id in sorted(matches)]


def grades_for(s: scorers.LocationRule, run: RunRecord, snapshot: catalog.SnapshotSynced,
               parsed: dict[str, list[catalog.Location] | str]) -> list[catalog.GradeEmitted]:
    """The rule's own grades of a run (the server's SQL rule gives the same: a test holds
    it), for a run whose issues are all candidates."""
    return _grades(s, run, snapshot, s.match_run(parsed_only(parsed), snapshot.ground_truth))


async def _judged(store: EventStore, s: scorers.Scorer, run: RunRecord,
                  snapshot: catalog.SnapshotSynced) -> int | None:
    """How many issues `s` already gave a verdict (a grade, or unscorable) for the run
    against this ground truth, if it did: a scorer that asks a model is asked once per run
    and ground truth (re-asking would cost, and could differ)."""
    stream = streams.grading(run.run_id, scorers.ref(s))
    done = 0
    for rec in await store.read_stream(stream):
        e = rec.event
        if isinstance(e, catalog.GradeEmitted | catalog.GradesUnscorable) \
                and e.scorer.ground_truth_hash == snapshot.ground_truth_hash:
            done += 1 if isinstance(e, catalog.GradeEmitted) else len(e.issues)
    return done or None


@dataclasses.dataclass
class _Graded:
    grades: list[catalog.GradeEmitted]
    unscorable: catalog.GradesUnscorable | None  # the issues it could not grade, and why
    calls: list[Event]  # a model's llm.requested and llm.responded, if it asked one
    stored: int  # verdicts it gave before (a model not asked again)
    rule: str | None = None  # candidates.RULE, when it kept an issue from the location rule
    never: frozenset[str] = frozenset()  # the issues it kept from the location rule


async def _graded(store: EventStore, grader: verdicts.RunScorer, run: RunRecord,
                  snapshot: catalog.SnapshotSynced,
                  parsed: dict[str, list[catalog.Location] | str], dry_run: bool) -> _Graded:
    """One run's grades through the scorer's seam."""
    s = grader.scorer
    issues = parsed_only(parsed)
    if grader.asks_a_model:
        if (done := await _judged(store, s, run, snapshot)) is not None:
            return _Graded([], None, [], done)
        if dry_run:  # a dry run asks nothing: a call would cost, and must be recorded
            return _Graded(_grades(s, run, snapshot, {i: scorers.Match() for i in issues}),
                           None, [], 0)
    never = frozenset() if grader.asks_a_model else \
        candidates.never(run.definition, run.rationales) & issues.keys()
    said = await grader.verdicts(store, run.run_id, issues, run.rationales,
                                 snapshot.ground_truth, never)
    unscorable = None if not said.unscorable else catalog.GradesUnscorable(
        critique_run_id=run.run_id, scorer=scorers.scorer_ref(s, snapshot.ground_truth_hash),
        issues=[catalog.IssueUnscorable(issue_id=i, reason=r)
                for i, r in sorted(said.unscorable.items())])
    return _Graded(_grades(s, run, snapshot, said.matches), unscorable, said.calls, 0,
                   candidates.RULE if never else None, never)


@dataclasses.dataclass
class RescoreReport:
    scorer: str
    ground_truth: GroundTruthChoice
    selected: int = 0
    graded_runs: int = 0
    grades: int = 0
    appended: int = 0
    unscorable: Counter[str] = dataclasses.field(default_factory=Counter)
    unscorable_issues: int = 0  # issues a judge looked at and could not grade (see report)
    scorer_errors: list[str] = dataclasses.field(default_factory=list)  # by run
    chance: chance_runs.Clock = dataclasses.field(default_factory=chance_runs.Clock)

    @property
    def accounted(self) -> bool:
        return self.graded_runs + sum(self.unscorable.values()) == self.selected


async def rescore(
    store: EventStore,
    s: scorers.Scorer,
    selection: Selection,
    *,
    ground_truth: GroundTruthChoice = "at-run",
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    selected: Callable[[int], None] | None = None,
    chunk_runs: int = SERVER_CHUNK_RUNS,
) -> RescoreReport:
    """Grade the selected runs under `s`; append the grades unless `dry_run`.
    `selected` is told how many runs were selected, before any is graded. A scorer with a
    rule in SQL grades on the server, `chunk_runs` runs per statement at most."""
    report = RescoreReport(scorers.ref(s), ground_truth)
    if not dry_run:
        await registration.ensure_registered(store, s)
    known = await specimen_sync.history(store)
    on_server = server_grading.grades_on_server(s)
    runs = await selected_runs(store, selection, issues=not on_server)
    report.selected = len(runs)
    if selected:
        selected(len(runs))
    # The server's SQL rule knows nothing of candidates: runs that may hold an issue that
    # is never one (a baseline's) are graded in Python.
    in_python = [r for r in runs if not on_server or candidates.may_exclude(r.definition)]
    if on_server:
        await with_issues(store, in_python)
        await _grade_on_server(store, s, [r for r in runs if not candidates.may_exclude(
            r.definition)], known, report, dry_run=dry_run, progress=progress,
            chunk_runs=chunk_runs)
    await grade_runs(store, s, in_python, known, report, dry_run=dry_run, progress=progress)
    return report


async def _grade_on_server(
    store: EventStore, s: scorers.Scorer, runs: Sequence[RunRecord],
    known: dict[str, specimen_sync.SnapshotHistory], report: RescoreReport, *,
    dry_run: bool, progress: Callable[[int], None] | None, chunk_runs: int,
) -> None:
    """Grade `runs` on the server, one statement per chunk of runs, each committed: a crash
    loses one chunk. Runs without a finish or a ground truth are told apart here first."""
    todo: list[tuple[uuid.UUID, catalog.SnapshotSynced]] = []
    for run in runs:
        snapshot = ground_truth_for(run, known, report.ground_truth)
        reason = run_unscorable_reason(run, snapshot)  # the server checks the issues
        if reason is not None:
            report.unscorable[reason_kind(reason)] += 1
        else:
            assert snapshot is not None
            todo.append((run.run_id, snapshot))
    if progress and len(todo) < len(runs):
        progress(len(runs) - len(todo))
    # At most a twentieth of the work a chunk: what is appended last is projected last, and
    # a small last chunk keeps that tail short. One chunk at a time: the projection runner
    # needs the other core (two at once appended sooner and projected later, measured).
    size = min(chunk_runs, max(SERVER_MIN_CHUNK_RUNS, math.ceil(len(todo) / 20)))
    chances: list[chance_runs.Write] = []  # appended together at the end (a rerun makes them)
    for at in range(0, len(todo), size):
        chunk = todo[at:at + size]
        graded = await server_grading.grade(store, s, chunk, dry_run=dry_run)
        for reason in graded.malformed.values():
            report.unscorable[reason_kind(reason)] += 1
        if not dry_run:
            chances += await chance_runs.of_server_runs(store, s, chunk, graded,
                                                        report.chance)
        report.graded_runs += len(chunk) - len(graded.malformed)
        report.grades += graded.grades
        report.appended += graded.appended
        if progress:
            progress(len(chunk))
    for at in range(0, len(chances), FLUSH_GRADES):
        with report.chance:  # (their appends are the chance's cost too)
            await store.append_many(chances[at:at + FLUSH_GRADES])


async def grade_runs(
    store: EventStore,
    s: scorers.Scorer,
    runs: Sequence[RunRecord],
    known: dict[str, specimen_sync.SnapshotHistory],
    report: RescoreReport,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Grade `runs` under `s` into `report`, appending the grades unless `dry_run`: the
    loop shared by `props rescore` and the grader reactor."""
    pending: list[tuple[str, list[Event | NewEvent]]] = []
    chances: list[chance_runs.Write] = []  # appended apart: a stream once per append_many
    grader = verdicts.of(s)  # how `s` is asked: once, not per run

    def written(results: list[AppendResult]) -> None:
        report.appended += sum(r.last_version - r.first_version + 1 for r in results
                               if not r.already_stored and streams.is_grading(r.stream_id))

    # The server appends one chunk while the next is graded.
    async with bulk.WriteAhead(written) as writer:

        async def both(grades: list[chance_runs.Write], levels: list[chance_runs.Write],
                       ) -> list[AppendResult]:
            written = await store.append_many(grades) if grades else []
            if levels:  # (not counted as grades)
                await store.append_many(levels)
            return written

        async def flush() -> None:
            if (pending or chances) and not dry_run:
                await writer.submit(both(list(pending), list(chances)))
            pending.clear()
            chances.clear()

        with bulk.gc_paused():  # each run's issues, grades and events: acyclic, and many
            for run in runs:
                await anyio.lowlevel.checkpoint()  # the append in flight gets its turns
                pending += await _grade_one(store, grader, run, known, report, dry_run,
                                            chances)
                # One COPY per chunk of runs, each chunk committed: a crash loses one chunk.
                if (len(pending) >= FLUSH_RUNS
                        or sum(len(b) for _, b in pending) >= FLUSH_GRADES):
                    await flush()
                if progress:
                    progress(1)
            await flush()


async def _grade_one(
    store: EventStore, grader: verdicts.RunScorer, run: RunRecord,
    known: dict[str, specimen_sync.SnapshotHistory], report: RescoreReport, dry_run: bool,
    chances: list[chance_runs.Write],
) -> list[tuple[str, list[Event | NewEvent]]]:
    """Grade one run into `report`; return what it appends: its grades and, from a scorer
    that asks a model, the calls that produced them (in the same write). A location rule's
    chance level of the run goes to `chances`."""
    snapshot = ground_truth_for(run, known, report.ground_truth)
    parsed = parse_issues(run)
    reason = unscorable_reason(run, snapshot, parsed)
    if reason is not None:
        report.unscorable[reason_kind(reason)] += 1
        return []
    assert snapshot is not None
    try:
        graded = await _graded(store, grader, run, snapshot, parsed, dry_run)
    except JudgeError as exc:
        report.unscorable["scorer error"] += 1
        report.scorer_errors.append(f"{run.run_id}: {exc}")
        return []
    grades, calls, unscorable = graded.grades, graded.calls, graded.unscorable
    report.grades += graded.stored
    report.unscorable_issues += 0 if unscorable is None else len(unscorable.issues)
    report.graded_runs += 1
    report.grades += len(grades)
    writes: list[tuple[str, list[Event | NewEvent]]] = []
    noted = {"candidates": graded.rule} if graded.rule else {}
    said: list[Event | NewEvent] = [NewEvent(g, grade_ids.grade_id(g, graded.rule), dict(noted))
                                    for g in grades]
    if unscorable is not None:
        said.append(NewEvent(unscorable, grade_ids.unscorable_id(unscorable)))
    if said:
        writes.append((streams.grading(run.run_id, scorers.ref(grader.scorer)), said))
    if calls:
        writes.append((streams.judge(run.run_id, scorers.ref(grader.scorer)), list(calls)))
    # (a run with no issue at all has chance 0 in the score views: nothing to record)
    if not dry_run and unscorable is None and run.issues and (level := await chance_runs.of_run(
            store, grader.scorer, run.run_id, snapshot,
            {i: locs for i, locs in parsed_only(parsed).items() if i not in graded.never},
            report.chance)):
        chances.append(level)
    return writes


# -- comparing two scorers ----------------------------------------------------------------------

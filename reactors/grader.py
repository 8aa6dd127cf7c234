"""The grader: every issue of every finished critic run graded under the active scorer.

It handles `run.finished` (grade that run) and `scorer.activated` (switch, then grade every
finished run under the new scorer). It reads runs and ground truth from the log itself, not
from projections, so it never races the projection runner. Grades go to the scorer's own
streams with ids derived from (run, issue, scorer, ground truth): handling an event twice
appends nothing twice. A run that cannot be scored (no ground truth, a malformed issue) gets
no grades; `props compare` and `grading_pending` name it.
"""

from __future__ import annotations

import logging

import anyio.abc
import orjson

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_sync
from props.core.log.checkpoints import START
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers

log = logging.getLogger(__name__)

DEFAULT_SCORER = scorers.DEFAULT_SCORER  # location tiers, one to one, decoys by overlap


def run_record(records: list[RecordedEvent]) -> rescoring.RunRecord | None:
    """A critic run as re-scoring sees it, folded from its own stream."""
    run: rescoring.RunRecord | None = None
    for rec in records:
        e = rec.event
        if isinstance(e, catalog.RunRequested):
            if e.agent_type != "critic":
                return None
            run = rescoring.RunRecord(e.run_id, "requested", e.example.snapshot,
                                      e.example.files_hash or "", rec.recorded_at, e.model,
                                      e.definition, imported=rec.imported)
        elif run is None:
            continue
        elif isinstance(e, catalog.IssueReported):
            run.issues[e.issue_id] = orjson.dumps([loc.model_dump() for loc in e.locations])
            run.rationales[e.issue_id] = e.rationale  # (a baseline's rule: candidates)
        elif isinstance(e, catalog.RunFinished):
            run.status = e.status
    return run


async def finished_runs(store: EventStore) -> list[rescoring.RunRecord]:
    """Every finished critic run, folded from the log (not from projections: a reactor never
    races the projection runner)."""
    by_stream: dict[str, list[RecordedEvent]] = {}
    wanted = ["run.requested", "issue.reported", "run.finished"]
    async for batch in store.iter_all(START, types=wanted):
        for rec in batch:
            by_stream.setdefault(rec.stream_id, []).append(rec)
    return [r for recs in by_stream.values() if (r := run_record(recs)) is not None
            and r.status in rescoring.FINISHED]


def _in_process(ref: str) -> scorers.Scorer | None:
    """The scorer of that name if props runs it itself; None for a grader in containers
    (the supervisor's), which this reactor leaves alone."""
    return scorers.SCORERS.get(ref)


class Grader:
    name = "grader"
    types: tuple[str, ...] = ("run.finished", "scorer.activated")

    def __init__(self, store: EventStore, default_scorer: str = DEFAULT_SCORER) -> None:
        self.store = store
        self.default_scorer = default_scorer
        self.scorer: scorers.Scorer | None = None
        self.graded_runs = 0
        self.grades = 0

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        active = await registration.active_scorer(self.store)
        if active is None:  # a new log: the default scorer becomes the active one
            default = scorers.scorer(self.default_scorer)
            await registration.ensure_registered(self.store, default)
            await registration.activate(self.store, default.name, default.version)
            active = self.default_scorer
        self.scorer = _in_process(active)

    async def handle(self, rec: RecordedEvent) -> None:
        e = rec.event
        if isinstance(e, catalog.ActiveScorerSet):
            if rec.imported:  # its origin's activation: history here, never a switch
                return
            self.scorer = _in_process(f"{e.name}@{e.version}")
            if self.scorer is not None:
                await registration.ensure_registered(self.store, self.scorer)
                await self._backfill()
        elif isinstance(e, catalog.RunFinished) and self.scorer is not None:
            run = run_record(await self.store.read_stream(streams.run(e.run_id)))
            if run is not None:
                await self._grade([run])

    async def _grade(self, runs: list[rescoring.RunRecord]) -> None:
        assert self.scorer is not None
        known: dict[str, specimen_sync.SnapshotHistory] = {}
        for slug in {r.snapshot for r in runs}:
            if (h := await specimen_sync.history_of(self.store, slug)) is not None:
                known[slug] = h
        report = rescoring.RescoreReport(scorers.ref(self.scorer), "at-run")
        await rescoring.grade_runs(self.store, self.scorer, runs, known, report)
        self.graded_runs += report.graded_runs
        self.grades += report.appended

    async def _backfill(self) -> None:
        """Every finished critic run, from the log, graded under the newly active scorer."""
        runs = await finished_runs(self.store)
        log.info("grader: grading %d finished runs under %s", len(runs),
                 scorers.ref(self.scorer) if self.scorer else "?")
        await self._grade(runs)

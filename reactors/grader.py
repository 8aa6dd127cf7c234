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
import uuid

import anyio.abc
import orjson

from props.core.domain import catalog, specimen_sync
from props.core.log.events import NewEvent, RecordedEvent
from props.core.log.store import START, EventStore
from props.core.scoring import rescoring, scorers

log = logging.getLogger(__name__)

DEFAULT_SCORER = scorers.DEFAULT_SCORER  # location tiers, one to one, decoys by overlap
_NAMESPACE = uuid.UUID("c1f2d3e4-5a6b-4c7d-8e9f-0a1b2c3d4e5f")


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
                                      e.definition)
        elif run is None:
            continue
        elif isinstance(e, catalog.IssueReported):
            run.issues[e.issue_id] = orjson.dumps([loc.model_dump() for loc in e.locations])
        elif isinstance(e, catalog.RunFinished):
            run.status = e.status
    return run


async def finished_runs(store: EventStore) -> list[rescoring.RunRecord]:
    """Every finished critic run, folded from the log (not from projections: a reactor never
    races the projection runner)."""
    streams: dict[str, list[RecordedEvent]] = {}
    wanted = ["run.requested", "issue.reported", "run.finished"]
    async for batch in store.iter_all(START, types=wanted):
        for rec in batch:
            streams.setdefault(rec.stream_id, []).append(rec)
    return [r for recs in streams.values() if (r := run_record(recs)) is not None
            and r.status in rescoring.FINISHED]


async def active_scorer(store: EventStore) -> str | None:
    """The scorer the last `scorer.activated` event names, as NAME@VERSION."""
    active = None
    async for batch in store.iter_all(START, types=["scorer.activated"]):
        for rec in batch:
            e = rec.event
            if isinstance(e, catalog.ActiveScorerSet):
                active = f"{e.name}@{e.version}"
    return active


async def activate(store: EventStore, s: scorers.Scorer) -> None:
    await rescoring.ensure_registered(store, s)
    event_id = uuid.uuid5(_NAMESPACE, f"default-activation:{scorers.ref(s)}")
    await store.append(f"scorer-{s.name}", [NewEvent(
        catalog.ActiveScorerSet(name=s.name, version=s.version), event_id)])


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
        active = await active_scorer(self.store)
        if active is None:  # a new log: the default scorer becomes the active one
            await activate(self.store, scorers.scorer(self.default_scorer))
            active = self.default_scorer
        self.scorer = _in_process(active)

    async def handle(self, rec: RecordedEvent) -> None:
        e = rec.event
        if isinstance(e, catalog.ActiveScorerSet):
            self.scorer = _in_process(f"{e.name}@{e.version}")
            if self.scorer is not None:
                await rescoring.ensure_registered(self.store, self.scorer)
                await self._backfill()
        elif isinstance(e, catalog.RunFinished) and self.scorer is not None:
            run = run_record(await self.store.read_stream(f"run-{e.run_id}"))
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

"""What `props serve` says while runs go through: one line per change of a run's state
(requested, running, finished, graded), or with `--quiet` one summary a minute.

It follows the log from where it stands when the service starts (what happened before is
`props runs list`'s), reads only the types it tells of, and forgets a run once it is
graded or past a bound, so a service that runs for months holds a bounded map.
"""

from __future__ import annotations

import collections
import logging
import uuid
from typing import Any

import anyio

from props.core.domain import caps, catalog
from props.core.log.checkpoints import START
from props.core.log.store import EventStore
from props.core.scoring import scorers

log = logging.getLogger("props.runs")

TOLD = frozenset({"run.requested", "run.started", "run.finished", "issue.reported",
                  "grade.emitted", "grades.emitted"})
REMEMBERED = 10_000  # runs whose issues are counted at once (the oldest are forgotten)
SUMMARY_SECONDS = 60.0


def _short(run_id: uuid.UUID) -> str:
    return str(run_id)[:8]


class Narrator:
    """Turns events into lines (`line` is pure: the tests feed it events)."""

    def __init__(self) -> None:
        self.issues: collections.OrderedDict[uuid.UUID, int] = collections.OrderedDict()
        self.counts: collections.Counter[str] = collections.Counter()

    def _count_issue(self, run_id: uuid.UUID) -> None:
        self.issues[run_id] = self.issues.pop(run_id, 0) + 1
        while len(self.issues) > REMEMBERED:
            self.issues.popitem(last=False)

    def lines(self, events: list[Any]) -> list[str]:
        """The lines a batch of events makes: one per change of a run's state, and one per
        run and scorer for its grades (one `grades.emitted`, or the `grade.emitted` of each
        issue, appended together)."""
        out: list[str] = []
        graded: dict[tuple[uuid.UUID, str], list[catalog.IssueGrade | Any]] = {}
        for event in events:
            if isinstance(event, catalog.GradesEmitted | catalog.GradeEmitted):
                key = (event.critique_run_id, f"{event.scorer.name}@{event.scorer.version}")
                graded.setdefault(key, []).extend(
                    event.grades if isinstance(event, catalog.GradesEmitted) else [event])
            elif (said := self._line(event)) is not None:
                out.append(said)
        for (run_id, scorer), grades in graded.items():
            self.counts["graded"] += 1
            self.issues.pop(run_id, None)
            finds = sum(1 for g in grades
                        if g.tp_id is not None and g.grade >= scorers.FIND_GRADE)
            out.append(f"run {_short(run_id)} graded by {scorer}: {finds} find(s) in "
                       f"{len(grades)} issue(s)")
        return out

    def _line(self, event: Any) -> str | None:
        if isinstance(event, catalog.IssueReported):
            self._count_issue(event.run_id)
            return None
        if isinstance(event, catalog.RunRequested):
            self.counts["requested"] += 1
            return (f"run {_short(event.run_id)} requested: {event.definition} (model "
                    f"{event.model}) on {event.example.snapshot}")
        if isinstance(event, catalog.RunStarted):
            self.counts["running"] += 1
            return f"run {_short(event.run_id)} running"
        if isinstance(event, catalog.RunFinished):
            self.counts[event.status] += 1
            why = f" ({event.failure.phase}: {event.failure.category})" if event.failure else ""
            cap = caps.said(event.failure) if event.failure else ""
            return (f"run {_short(event.run_id)} {event.status.replace('_', ' ')}{why}: "
                    f"{self.issues.get(event.run_id, 0)} issue(s) reported"
                    + (f"; {cap}" if cap else ""))
        return None

    def summary(self) -> str | None:
        """What changed since the last summary, if anything did; then it starts again."""
        if not self.counts:
            return None
        said = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in self.counts.items())
        self.counts.clear()
        return f"runs in the last {SUMMARY_SECONDS:.0f} s: {said}"


async def narrate(store: EventStore, quiet: bool) -> None:
    """Log each run's changes of state from now on (or, `quiet`, a summary a minute)."""
    narrator = Narrator()
    fence = await store.fence_status()
    after = fence.last_visible or START
    async with anyio.create_task_group() as tg:
        if quiet:
            async def summarize() -> None:
                while True:
                    await anyio.sleep(SUMMARY_SECONDS)
                    if said := narrator.summary():
                        log.info(said)

            tg.start_soon(summarize)
        async with store.subscribe(after, decode=lambda t, _v: t in TOLD) as sub:
            async for batch in sub:
                for said in narrator.lines([rec.event for rec in batch]):
                    if not quiet:
                        log.info(said)

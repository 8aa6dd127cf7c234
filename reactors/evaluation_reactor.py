"""The service's evaluation driver: every open evaluation that no `props eval run` drives
(one posted through the API, `props eval run --detach`, or a drive killed midway) is driven
here to its end, within its plan's `max_concurrency`, its critics' `max_connections` and its
`budget_usd`; a token's, within its runs-in-flight quota as well (its direct runs and its
other evaluations' count: one requested past it would be a run the API refuses).

Whoever drives an evaluation holds its lock (leadership.evaluation): `props eval run` for
its whole drive, this reactor for one look at a time, so there is one driver whoever runs
it. A look requests the cases that have no result as far as the ceiling and the budget
allow (evaluation_driver.look, the step `props eval run` takes too); the reactor looks when
a run finishes or an evaluation starts, and every few seconds besides (a grade settles a
case too). When every case is done, or a stop applies with nothing in flight, it records
`evaluation.ended` as `props eval run` would.
"""

from __future__ import annotations

import logging

import anyio
import anyio.abc

from props.core.domain import catalog, evaluations, quotas, streams
from props.core.domain.evaluations import CaseState, Evaluation
from props.core.log import leadership
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.reactors import evaluation_steps as driver
from props.schema import queries

log = logging.getLogger(__name__)
_Q = queries.load("quotas")
LOOK_SECONDS = 2.0  # the most seconds between looks at the open evaluations
LOOK_GAP = 0.2  # the fewest


class EvaluationDriver:
    name = "evaluations"
    types: tuple[str, ...] = ("evaluation.started", "run.finished")

    def __init__(self, store: EventStore, look_seconds: float = LOOK_SECONDS,
                 shares: quotas.Quotas | None = None) -> None:
        self.store = store
        self.look_seconds = look_seconds
        self.shares = shares or quotas.Quotas()  # a token's runs in flight held here too
        self._moved = anyio.Event()
        # (name, version) -> the evaluation as recorded, and its cases known final
        self._known: dict[tuple[str, int], tuple[Evaluation, dict[str, CaseState]]] = {}
        self.looks = 0

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        tg.start_soon(self._loop, name="props-evaluation-driver")

    async def handle(self, rec: RecordedEvent) -> None:
        if isinstance(rec.event, catalog.RunFinished | catalog.EvaluationStarted):
            self._moved.set()

    async def _loop(self) -> None:
        while True:
            with anyio.move_on_after(self.look_seconds):
                await self._moved.wait()
            await anyio.sleep(LOOK_GAP)  # (a busy log would have it look without a pause)
            self._moved = anyio.Event()
            await self._look_logged()

    async def _look_logged(self) -> None:
        """A look; one that fails (the database away, ...) is logged: the next tries again."""
        try:
            await self.look_all()
        except Exception as exc:
            log.warning("looking at the open evaluations failed (%s: %s); the next look "
                        "tries again", type(exc).__name__, exc)

    async def look_all(self) -> None:
        """One look at each open evaluation that no other driver holds."""
        names = [r["name"] for r in await self.store.sql.fetch(_Q["open_evaluation_names"])]
        if not names:
            return
        for name in names:
            async with leadership.if_free(self.store, leadership.evaluation(name)) as mine:
                if mine:  # (not: `props eval run` drives it)
                    await self._look(name)
        self.looks += 1

    async def _look(self, name: str) -> None:
        records = await self.store.read_stream(streams.evaluation(name))
        started = [r.event for r in records if isinstance(r.event, catalog.EvaluationStarted)]
        if not started or any(isinstance(r.event, catalog.EvaluationEnded) and
                              r.event.version == started[-1].version for r in records):
            return  # (ended by another driver since the names were read)
        key = (name, started[-1].version)
        if key not in self._known:  # (its cases are a blob: read once)
            self._known[key] = (await evaluations.recorded(self.store, name), {})
        ev, settled = self._known[key]
        ceiling = await driver.ceiling_of(self.store, ev, None)
        most = None  # (the operator's own evaluations have no quota)
        if ev.requester is not None:
            most = quotas.runs_left(self.shares, await quotas.held(self.store.sql,
                                                                   ev.requester))
        now = await driver.look(self.store, ev, ceiling, driver.Stops(), settled, most)
        if now.requested:
            log.info("evaluation %s: requested %d run(s)", ev.name, now.requested)
        if now.over:
            ended = await driver.end_drive(self.store, ev, now.outcome)
            log.info("evaluation %s v%d ended: %s", ev.name, ev.version, ended.outcome)
            del self._known[key]

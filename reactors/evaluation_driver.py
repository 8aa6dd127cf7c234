"""Driving an evaluation to its end in this process: serving the reactors meanwhile and
taking one look (props.reactors.evaluation_steps) each time the log moves. `props eval run`
and `props demo` drive evaluations through here; how they print is theirs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio

from props.core.domain import catalog
from props.core.domain.evaluations import DONE, CaseState, Evaluation
from props.core.log import leadership
from props.core.log.store import EventStore
from props.core.log.subscription import Wakeups
from props.core.scoring import registration
from props.projections import status as projection_status
from props.reactors.evaluation_steps import (
    Ceiling,
    Driven,
    Look,
    Progress,
    Stops,
    case_states,
    ceiling_of,
    end_drive,
    first_look,
    look,
    request_detached,
    request_within,
    retry_line,
)
from props.reactors.launcher.launcher import Launcher
from props.reactors.runtimes.container_runtime import ContainerRuntime

__all__ = [
    "DONE",
    "Ceiling",
    "Driven",
    "Look",
    "Progress",
    "Stops",
    "case_states",
    "caught_up",
    "ceiling_of",
    "end_drive",
    "first_look",
    "look",
    "request_detached",
    "request_within",
    "retry_line",
    "serve_until_done",
    "watch",
]

TICK = 0.5  # the most seconds between looks at the cases (the log's NOTIFY wakes sooner)
LOOK_GAP = 0.1  # the fewest seconds between two looks ...
LOOK_SHARE = 3  # ... and at least this many times a look's own length: a driver of many
# open cases on a busy log spends at most a third of its time (and its database's) looking


async def _drive(store: EventStore, ev: Evaluation, ceiling: Ceiling, stops: Stops,
                 show: Callable[[str], None]) -> catalog.EvaluationOutcome:
    """Request what has no result within the ceiling until every case is done (or a stop
    applies), calling `show` with a line each time the cases move; returns how it ended."""
    progress, deadline, shown = Progress(time.monotonic()), time.monotonic() + stops.wait, ""
    settled: dict[str, CaseState] = {}  # scored, excluded, or failed past its retries
    retried, told = 0, ""  # failed cases requested again (--retry-failed), and what was said
    async with Wakeups(store) as log_moved:
        while True:
            began = time.monotonic()
            now = await look(store, ev, ceiling, stops, settled)
            took = time.monotonic() - began
            line = progress.line(ev, now.states)
            if line != shown:
                show(line)
                shown = line
            retried += now.retried
            if stops.retry_failed and (now.retried or now.not_retried) and \
                    (said := retry_line(retried, now)) != told:
                show(said)
                told = said
            if now.over or time.monotonic() > deadline:
                return now.outcome
            # A case moves with an append: look again then, but not sooner than LOOK_GAP
            # (a busy log would otherwise have every open case read 50 times a second).
            await log_moved.wait(TICK, apart=max(LOOK_GAP, LOOK_SHARE * took))


async def watch(store: EventStore, ev: Evaluation, show: Callable[[str], None],
                wait: float) -> list[CaseState]:
    """Follow an evaluation another process drives (`props serve` after `--detach`) until
    every case is done or `wait` seconds pass, calling `show` as the cases move; requests
    nothing."""
    progress, deadline, shown = Progress(time.monotonic()), time.monotonic() + wait, ""
    settled: dict[str, CaseState] = {}
    async with Wakeups(store) as log_moved:
        while True:
            began = time.monotonic()
            states = await case_states(store, ev, await registration.active_scorer(store),
                                       settled=settled)
            took = time.monotonic() - began
            settled.update((s.case.key, s) for s in states if s.state in DONE)
            if (now := progress.line(ev, states)) != shown:
                show(now)
                shown = now
            if all(s.state in DONE or s.state == "failed" for s in states) \
                    or time.monotonic() > deadline:
                return states
            await log_moved.wait(TICK, apart=max(LOOK_GAP, LOOK_SHARE * took))


async def caught_up(store: EventStore, seconds: float = 60) -> None:
    """The analysts' tables hold what the log says (the scores are read from them)."""
    with anyio.move_on_after(seconds):
        while any(s.lag_events for s in await projection_status.of(store)):  # noqa: ASYNC110
            await anyio.sleep(0.1)


async def serve_until_done(store: EventStore, ev: Evaluation,
                           runtimes: Sequence[ContainerRuntime], stops: Stops,
                           show: Callable[[str], None]) -> Driven:
    """Serve the reactors in this process and drive `ev` until its cases are done (or a stop
    applies), then record how it ended (`evaluation.ended`). `show` is given the ceiling in
    force, then a line each time the cases move. This process is the evaluation's one
    driver meanwhile (its lock): a service's evaluation driver leaves it alone."""
    from props.reactors.service import Service  # (which serves this module's reactor)

    service = Service(store, runtimes, poll_interval=0.2)
    capacity = next((h.reactor.capacity for h in service.hosts
                     if isinstance(h.reactor, Launcher)), None)
    ceiling = await ceiling_of(store, ev, capacity)
    show(f"at most {ceiling.runs} run(s) at once: {ceiling.why}")
    async with leadership.lead(store.dsn, leadership.evaluation(ev.name),
                               f"the driver of evaluation {ev.name}"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run, name="props-eval-service")
            outcome = await _drive(store, ev, ceiling, stops, show)
            await caught_up(store)
            tg.cancel_scope.cancel()
        return await end_drive(store, ev, outcome)


"""Driving an evaluation to its end: the ceiling in force, where each case stands, requesting
what has no result within the ceiling, and serving the reactors in this process meanwhile.
`props eval run` and `props demo` drive evaluations through here; how they print is theirs."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence

import anyio

from props.core.domain import catalog, definitions, evaluations
from props.core.domain.evaluations import CaseState, Evaluation
from props.core.log.store import EventStore
from props.core.log.subscription import Wakeups
from props.core.scoring import registration
from props.projections import status as projection_status
from props.reactors.containers import ContainerRuntime
from props.reactors.launcher import Launcher
from props.reactors.run_environment import AgentEnvironment
from props.reactors.service import Service

TICK = 0.5  # the most seconds between looks at the cases (the log's NOTIFY wakes sooner)
LOOK_GAP = 0.1  # the fewest seconds between two looks
DONE: frozenset[str] = frozenset({"scored", "excluded"})


@dataclasses.dataclass(frozen=True)
class Stops:
    """When driving ends before every case is done: after `wait` seconds, past
    `fail_on_error` failed cases (a count, or a fraction of the cases below 1), and how
    often a failed case is requested again."""

    wait: float = 3600.0
    fail_on_error: float | None = None
    retry_failed: int = 0

@dataclasses.dataclass(frozen=True)
class Ceiling:
    """How many of the evaluation's runs may be in flight at once, and which ceiling that is;
    per critic, its model's own (`max_connections`)."""

    runs: int
    why: str
    per_definition: dict[str, int]


async def ceiling_of(store: EventStore, ev: Evaluation, capacity: int | None) -> Ceiling:
    found = {"the plan's max_concurrency": ev.plan.max_concurrency}
    if capacity is not None:
        found["the launcher's capacity"] = capacity
    per_definition: dict[str, int] = {}
    for critic in ev.plan.critic:
        d = await definitions.resolve(store, "critic", critic.definition, critic.ref)
        if d is not None and (limit := evaluations.max_connections(d)) is not None:
            per_definition[critic.definition] = limit
            found[f"{critic.definition}'s max_connections"] = limit
    why = min(found, key=lambda k: found[k])
    return Ceiling(found[why], why, per_definition)


async def case_states(store: EventStore, ev: Evaluation, scorer: str | None,
                      stopped: bool = False, settled: dict[str, CaseState] | None = None,
                      ) -> list[CaseState]:
    """Each case's state; `settled`: those already known to be final (read once, not at
    every look), filled in as cases settle."""
    known = settled or {}
    looked = iter(await evaluations.states_of(
        store, ev, [c for c in ev.cases if c.key not in known], scorer, stopped))
    return [known[c.key] if c.key in known else next(looked) for c in ev.cases]


def _failure_limit(stops: Stops, cases: int) -> float:
    given = stops.fail_on_error
    if given is None:
        return math.inf
    return given * cases if 0 < given < 1 else given


@dataclasses.dataclass
class Progress:
    """The running account of an evaluation's cases. Done is scored or excluded, and failed
    is said apart (a failure is no result). The time left is estimated when a case ends,
    from the pace so far, and stays put until the next one ends: it never grows while
    nothing finishes (a clock running against a fixed count would make it grow)."""

    began: float
    ended: int = 0  # cases done or failed when the estimate was made
    eta: str = ""

    def line(self, ev: Evaluation, states: Sequence[CaseState]) -> str:
        n = Counter(s.state for s in states)
        done = n["scored"] + n["excluded"]
        ended, left = done + n["failed"], len(states) - done - n["failed"]
        if ended != self.ended:
            self.ended = ended
            pace = (time.monotonic() - self.began) / ended if ended else 0.0
            self.eta = f"; about {pace * left:.0f} s left" if ended and left else ""
        spent = sum(s.cost_usd for s in states)
        budget = f" of ${ev.plan.budget_usd:.2f}" if ev.plan.budget_usd is not None else ""
        return (f"{ev.name}: {done}/{len(states)} done ({n['scored']} scored, "
                f"{n['excluded']} excluded), {n['failed']} failed, {n['running']} running, "
                f"{n['waiting']} waiting; spent ${spent:.2f}{budget}{self.eta}")


async def _drive(store: EventStore, ev: Evaluation, ceiling: Ceiling, stops: Stops,
                 show: Callable[[str], None]) -> catalog.EvaluationOutcome:
    """Request what has no result within the ceiling until every case is done (or a stop
    applies), calling `show` with a line each time the cases move; returns how it ended."""
    progress, deadline, shown = Progress(time.monotonic()), time.monotonic() + stops.wait, ""
    limit = _failure_limit(stops, len(ev.cases))
    outcome: catalog.EvaluationOutcome = "complete"
    settled: dict[str, CaseState] = {}  # scored, excluded, or failed past its retries
    async with Wakeups(store) as log_moved:
        while True:
            # (read each time: a new log's grader activates the default scorer as it starts)
            states = await case_states(store, ev, await registration.active_scorer(store),
                                       settled=settled)
            settled.update((s.case.key, s) for s in states if s.state in DONE or (
                s.state == "failed" and s.attempts > stops.retry_failed))
            now = progress.line(ev, states)
            if now != shown:
                show(now)
                shown = now
            retryable = [s for s in states
                         if s.state == "failed" and s.attempts <= stops.retry_failed]
            failed = sum(1 for s in states if s.state == "failed") - len(retryable)
            spent = sum(s.cost_usd for s in states)
            if ev.plan.budget_usd is not None and spent >= ev.plan.budget_usd:
                outcome = "budget_exhausted"
            elif failed > limit:
                outcome = "stopped_on_errors"
            flying = [s for s in states if s.state == "running"]
            if outcome == "complete":
                await request_within(store, ev, ceiling, flying,
                                     [s for s in states if s.state == "waiting"] + retryable)
            ended = all(s.state in DONE or s.state == "failed" for s in states) and not retryable
            if ended or (outcome != "complete" and not flying) or time.monotonic() > deadline:
                return outcome
            # A case moves with an append: look again then, but at most every LOOK_GAP
            # seconds (a busy log would otherwise have every open case read 50 times a s).
            await log_moved.wait(TICK, coalesce=LOOK_GAP)


async def watch(store: EventStore, ev: Evaluation, show: Callable[[str], None],
                wait: float) -> list[CaseState]:
    """Follow an evaluation another process drives (`props serve` after `--detach`) until
    every case is done or `wait` seconds pass, calling `show` as the cases move; requests
    nothing."""
    progress, deadline, shown = Progress(time.monotonic()), time.monotonic() + wait, ""
    settled: dict[str, CaseState] = {}
    async with Wakeups(store) as log_moved:
        while True:
            states = await case_states(store, ev, await registration.active_scorer(store),
                                       settled=settled)
            settled.update((s.case.key, s) for s in states if s.state in DONE)
            if (now := progress.line(ev, states)) != shown:
                show(now)
                shown = now
            if all(s.state in DONE or s.state == "failed" for s in states) \
                    or time.monotonic() > deadline:
                return states
            await log_moved.wait(TICK, coalesce=LOOK_GAP)


async def request_within(store: EventStore, ev: Evaluation, ceiling: Ceiling,
                         flying: list[CaseState], todo: list[CaseState]) -> int:
    """Request cases of `todo` while the ceiling has room; how many were requested."""
    per_definition = Counter(s.case.definition for s in flying)
    room = ceiling.runs - len(flying)
    requested = 0
    for s in todo:
        if room <= requested:
            break
        limit = ceiling.per_definition.get(s.case.definition)
        if limit is not None and per_definition[s.case.definition] >= limit:
            continue
        await evaluations.request(store, ev, s.case, s.attempts)
        per_definition[s.case.definition] += 1
        requested += 1
    return requested


async def request_detached(store: EventStore, ev: Evaluation) -> int:
    """Request every case without a run for another process to serve (`--detach`, the
    API): no ceiling of this process's, each model's own still; how many were requested."""
    ceiling = await ceiling_of(store, ev, None)
    states = await case_states(store, ev, await registration.active_scorer(store))
    return await request_within(store, ev, dataclasses.replace(ceiling, runs=len(states)),
                                [], [s for s in states if s.state == "waiting"])


async def caught_up(store: EventStore, seconds: float = 60) -> None:
    """The analysts' tables hold what the log says (the scores are read from them)."""
    with anyio.move_on_after(seconds):
        while any(s.lag_events for s in await projection_status.of(store)):  # noqa: ASYNC110
            await anyio.sleep(0.1)


@dataclasses.dataclass(frozen=True)
class Driven:
    outcome: catalog.EvaluationOutcome
    states: list[CaseState]  # each case's final state (no result: missing)


async def serve_until_done(store: EventStore, ev: Evaluation,
                           runtimes: Sequence[ContainerRuntime], stops: Stops,
                           show: Callable[[str], None],
                           agent_env: AgentEnvironment | None = None) -> Driven:
    """Serve the reactors in this process and drive `ev` until its cases are done (or a stop
    applies), then record how it ended (`evaluation.ended`). `show` is given the ceiling in
    force, then a line each time the cases move."""
    service = Service(store, runtimes, poll_interval=0.2, agent_env=agent_env)
    capacity = next((h.reactor.capacity for h in service.hosts
                     if isinstance(h.reactor, Launcher)), None)
    ceiling = await ceiling_of(store, ev, capacity)
    show(f"at most {ceiling.runs} run(s) at once: {ceiling.why}")
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run, name="props-eval-service")
        outcome = await _drive(store, ev, ceiling, stops, show)
        await caught_up(store)
        tg.cancel_scope.cancel()
    states = await case_states(store, ev, await registration.active_scorer(store),
                               stopped=True)
    if outcome == "complete" and not all(s.state in DONE for s in states):
        outcome = "incomplete"
    await evaluations.end(store, ev, outcome, states)
    return Driven(outcome, states)

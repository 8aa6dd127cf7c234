"""One look at an evaluation: the ceiling in force, where each case stands, and requesting
what has no result within the ceiling and the budget. Every driver takes this step: `props
eval run` (props.reactors.evaluation_driver) and the service's, for detached evaluations
(props.reactors.evaluation_reactor)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Sequence

from props.core.domain import catalog, definitions, evaluations
from props.core.domain.evaluations import DONE, CaseState, Evaluation
from props.core.log.store import EventStore
from props.core.scoring import registration


@dataclasses.dataclass(frozen=True)
class Stops:
    """When driving ends before every case is done: after `wait` seconds, past
    `fail_on_error` failed cases (a count, or a fraction of the cases below 1), and how
    often a failed case whose failure the retry rule calls retryable is requested again."""

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


@dataclasses.dataclass(frozen=True)
class Look:
    """What one look at an evaluation found, and did: its cases' states, how it stands
    (a stop that applies), the runs it requested (`retried` of them failed cases requested
    again), whether driving it is over, and the failed cases not requested again, counted by
    why (`not_retried`)."""

    states: list[CaseState]
    outcome: catalog.EvaluationOutcome
    requested: int
    over: bool
    retried: int = 0
    not_retried: dict[str, int] = dataclasses.field(default_factory=dict)


def _again(s: CaseState, stops: Stops) -> str | None:
    """None when a failed case is requested again (`--retry-failed`), else why not: the
    retry rule (props.core.log.faults) calls its failure not retryable, or its retries are
    spent."""
    if s.failure is None:
        return "failed with no closed fact: not retryable"
    verdict = s.failure.verdict()
    if not verdict.retryable:
        return f"{s.failure.category}: not retryable ({verdict.why})"
    if s.attempts > stops.retry_failed:
        return f"{s.failure.category}: retryable, its {stops.retry_failed} retr" \
            f"{'y' if stops.retry_failed == 1 else 'ies'} spent"
    return None


async def look(store: EventStore, ev: Evaluation, ceiling: Ceiling, stops: Stops,
               settled: dict[str, CaseState], most: int | None = None) -> Look:
    """Look at the cases once and request what has no result within the ceiling and the
    budget, and at most `most` runs (what its requester's runs-in-flight quota leaves);
    `settled`: the cases known final, filled in as they settle. A failed case is requested
    again only when the retry rule calls its failure retryable and its retries
    (`stops.retry_failed`) are not spent. The one step of every driver: `props eval run`,
    and the service's for detached evaluations."""
    # (read each time: a new log's grader activates the default scorer as it starts)
    states = await case_states(store, ev, await registration.active_scorer(store),
                               settled=settled)
    why_not = {s.case.key: _again(s, stops) for s in states if s.state == "failed"}
    settled.update((s.case.key, s) for s in states if s.state in DONE or (
        s.state == "failed" and why_not[s.case.key] is not None))
    retryable = [s for s in states if s.state == "failed" and why_not[s.case.key] is None]
    failed = sum(1 for s in states if s.state == "failed") - len(retryable)
    spent = sum(s.cost_usd for s in states)
    outcome: catalog.EvaluationOutcome = "complete"
    if ev.plan.budget_usd is not None and spent >= ev.plan.budget_usd:
        outcome = "budget_exhausted"
    elif failed > _failure_limit(stops, len(ev.cases)):
        outcome = "stopped_on_errors"
    flying = [s for s in states if s.state == "running"]
    requested: list[CaseState] = []
    if outcome == "complete":
        requested = await request_within(store, ev, ceiling, flying, [
            s for s in states if s.state == "waiting"] + retryable, _headroom(ev, flying, spent),
            most)
    ended = all(s.state in DONE or s.state == "failed" for s in states) and not retryable
    return Look(states, outcome, len(requested),
                ended or (outcome != "complete" and not flying and not requested),
                retried=sum(1 for s in requested if s.state == "failed"),
                not_retried=dict(Counter(w for w in why_not.values() if w is not None)))


def retry_line(retried: int, look: Look) -> str:
    """What `--retry-failed` did so far: how many failed cases it requested again, and why
    the others were not."""
    kept = sum(look.not_retried.values())
    line = f"--retry-failed: {retried} failed case(s) requested again (retryable by the rule)"
    if kept:
        line += f"; {kept} not: " + "; ".join(
            f"{n} {why}" for why, n in sorted(look.not_retried.items()))
    return line


def _headroom(ev: Evaluation, flying: Sequence[CaseState], spent: float) -> float | None:
    """What the budget leaves for new runs: the spend so far and what the runs in flight
    may still spend (their run budget) are set aside. None: the plan has no budget."""
    if ev.plan.budget_usd is None:
        return None
    reserved = sum(max(0.0, ev.plan.run_budget_usd - s.cost_usd) for s in flying)
    return ev.plan.budget_usd - spent - reserved

async def request_within(store: EventStore, ev: Evaluation, ceiling: Ceiling,
                         flying: list[CaseState], todo: list[CaseState],
                         headroom: float | None = None, most: int | None = None,
                         ) -> list[CaseState]:
    """Request cases of `todo` while the ceiling has room, each with at most what the
    budget's `headroom` leaves (none left: nothing more), and at most `most` of them; those
    requested."""
    per_definition = Counter(s.case.definition for s in flying)
    room = ceiling.runs - len(flying)
    if most is not None:
        room = min(room, most)
    requested: list[CaseState] = []
    for s in todo:
        if room <= len(requested) or (headroom is not None and headroom <= 0):
            break
        limit = ceiling.per_definition.get(s.case.definition)
        if limit is not None and per_definition[s.case.definition] >= limit:
            continue
        budget = None if headroom is None else min(headroom, ev.plan.run_budget_usd)
        await evaluations.request(store, ev, s.case, s.attempts, budget)
        if headroom is not None and budget is not None:
            headroom -= budget
        per_definition[s.case.definition] += 1
        requested.append(s)
    return requested


async def request_detached(store: EventStore, ev: Evaluation, most: int | None = None,
                           stops: Stops | None = None) -> int:
    """Request the first cases for the service to serve (`--detach`, the API), within the
    plan's ceiling and budget, and at most `most` (what the token's quota leaves): the
    service's evaluation driver requests the rest as runs finish
    (props.reactors.evaluation_reactor). How many were requested."""
    return (await first_look(store, ev, most, stops)).requested


async def first_look(store: EventStore, ev: Evaluation, most: int | None = None,
                     stops: Stops | None = None) -> Look:
    """`request_detached`'s look, whole: what it requested, of them the failed cases asked
    again (`stops.retry_failed`), and why the other failed ones were not."""
    return await look(store, ev, await ceiling_of(store, ev, None), stops or Stops(), {}, most)

@dataclasses.dataclass(frozen=True)
class Driven:
    outcome: catalog.EvaluationOutcome
    states: list[CaseState]  # each case's final state (no result: missing)

async def end_drive(store: EventStore, ev: Evaluation,
                    outcome: catalog.EvaluationOutcome) -> Driven:
    """Record how driving left `ev` (a case with no result is missing; complete only when
    every case is scored or excluded)."""
    states = await case_states(store, ev, await registration.active_scorer(store),
                               stopped=True)
    if outcome == "complete" and not all(s.state in DONE for s in states):
        outcome = "incomplete"
    await evaluations.end(store, ev, outcome, states)
    return Driven(outcome, states)

"""What `props eval` does: the handlers that the parsers of `props.tools.commands.evaluations`
name. `run` drives an evaluation to its end: it requests cases within the ceiling in force,
serves the reactors in this process, says how the cases stand as they move, and ends with the
evaluation's report."""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import anyio
import orjson

from props.core.domain import catalog, definitions, evaluations, streams
from props.core.domain.evaluations import CaseState, Evaluation
from props.core.log.store import EventStore
from props.core.scoring import intervals, registration
from props.projections import status as projection_status
from props.reactors.launcher import Launcher
from props.reactors.service import Service, container_runtimes
from props.schema import queries
from props.tools.commands.evaluations import EXIT_INCOMPLETE
from props.tools.render import Console, Table

console = Console(highlight=False)
_Q = queries.load("evaluations")
TICK = 0.5  # seconds between looks at the cases
DONE: frozenset[str] = frozenset({"scored", "excluded"})


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """How many of the evaluation's runs may be in flight at once, and which ceiling that is;
    per critic, its model's own (`max_connections`)."""

    runs: int
    why: str
    per_definition: dict[str, int]


async def _ceiling(store: EventStore, ev: Evaluation, capacity: int | None) -> Ceiling:
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


async def _states(store: EventStore, ev: Evaluation, scorer: str | None,
                  stopped: bool = False, settled: dict[str, CaseState] | None = None,
                  ) -> list[CaseState]:
    """Each case's state; `settled`: those already known to be final (read once, not at
    every look), filled in as cases settle."""
    out = []
    for c in ev.cases:
        known = settled.get(c.key) if settled is not None else None
        out.append(known or await evaluations.state_of(store, ev, c, scorer, stopped))
    return out


def _failure_limit(args: argparse.Namespace, cases: int) -> float:
    given: float | None = args.fail_on_error
    if given is None:
        return math.inf
    return given * cases if 0 < given < 1 else given


def _line(ev: Evaluation, states: Sequence[CaseState], began: float) -> str:
    n = Counter(s.state for s in states)
    done = n["scored"] + n["excluded"] + n["failed"]
    spent = sum(s.cost_usd for s in states)
    budget = f" of ${ev.plan.budget_usd:.2f}" if ev.plan.budget_usd is not None else ""
    elapsed = time.monotonic() - began
    left = len(states) - done
    eta = f"; about {elapsed / done * left:.0f} s left" if done and left else ""
    return (f"{ev.name}: {done}/{len(states)} done ({n['scored']} scored, {n['failed']} "
            f"failed, {n['excluded']} excluded), {n['running']} running, {n['waiting']} "
            f"waiting; spent ${spent:.2f}{budget}{eta}")


async def _drive(store: EventStore, ev: Evaluation, args: argparse.Namespace,
                 ceiling: Ceiling) -> catalog.EvaluationOutcome:
    """Request what has no result within the ceiling until every case is done (or a stop
    applies); returns how it ended."""
    began, deadline, shown = time.monotonic(), time.monotonic() + args.wait, ""
    limit = _failure_limit(args, len(ev.cases))
    outcome: catalog.EvaluationOutcome = "complete"
    settled: dict[str, CaseState] = {}  # scored, excluded, or failed past its retries
    while True:
        # (read each time: a new log's grader activates the default scorer as it starts)
        states = await _states(store, ev, await registration.active_scorer(store),
                               settled=settled)
        settled.update((s.case.key, s) for s in states if s.state in DONE or (
            s.state == "failed" and s.attempts > args.retry_failed))
        line = _line(ev, states, began)
        if line != shown:
            console.print(line, markup=False)
            shown = line
        retryable = [s for s in states if s.state == "failed" and s.attempts <= args.retry_failed]
        failed = sum(1 for s in states if s.state == "failed") - len(retryable)
        spent = sum(s.cost_usd for s in states)
        if ev.plan.budget_usd is not None and spent >= ev.plan.budget_usd:
            outcome = "budget_exhausted"
        elif failed > limit:
            outcome = "stopped_on_errors"
        flying = [s for s in states if s.state == "running"]
        if outcome == "complete":
            await _request_within(store, ev, ceiling, flying,
                                  [s for s in states if s.state == "waiting"] + retryable)
        ended = all(s.state in DONE or s.state == "failed" for s in states) and not retryable
        if ended or (outcome != "complete" and not flying) or time.monotonic() > deadline:
            return outcome
        await anyio.sleep(TICK)


async def _request_within(store: EventStore, ev: Evaluation, ceiling: Ceiling,
                          flying: list[CaseState], todo: list[CaseState]) -> None:
    per_definition = Counter(s.case.definition for s in flying)
    room = ceiling.runs - len(flying)
    for s in todo:
        if room <= 0:
            return
        limit = ceiling.per_definition.get(s.case.definition)
        if limit is not None and per_definition[s.case.definition] >= limit:
            continue
        await evaluations.request(store, ev, s.case, s.attempts)
        per_definition[s.case.definition] += 1
        room -= 1


# -- the report ---------------------------------------------------------------------------------


async def _caught_up(store: EventStore, seconds: float = 60) -> None:
    """The analysts' tables hold what the log says (the scores are read from them)."""
    with anyio.move_on_after(seconds):
        while any(s.lag_events for s in await projection_status.of(store)):  # noqa: ASYNC110
            await anyio.sleep(0.1)


async def _scores(store: EventStore, states: Sequence[CaseState],
                  scorer: str | None) -> list[dict[str, Any]]:
    """Recall and precision per critic (definition and model) under `scorer`, over its
    scored cases, each with the one interval method props reports (intervals.METHOD)."""
    if scorer is None:
        return []
    name, version = streams.parse_ref(scorer)
    scored = [s.run_id for s in states if s.state == "scored" and s.run_id is not None]
    rows = await store.sql.fetch(_Q["case_scores"], scored, name, version)
    by_run = {r["run_id"]: r for r in rows}
    out = []
    critics = sorted({(s.case.definition, s.case.model) for s in states})
    for definition, model in critics:
        mine = [s for s in states if (s.case.definition, s.case.model) == (definition, model)]
        recall: dict[tuple[str, str | None], list[float]] = {}
        precision: dict[tuple[str, str | None], list[float]] = {}
        for s in mine:
            if (r := by_run.get(s.run_id)) is None:
                continue
            key = (s.case.snapshot, s.case.files_hash)
            recall.setdefault(key, [0.0, 0.0])
            precision.setdefault(key, [0.0, 0.0])
            recall[key][0] += r["recalled"]
            recall[key][1] += r["expected"]
            precision[key][0] += r["finds"]
            precision[key][1] += r["graded"]
        out.append({"definition": definition, "model": model, "cases": len(mine),
                    "scored": sum(1 for s in mine if s.state == "scored"),
                    **_ratio("recall", recall), **_ratio("precision", precision)})
    return out


def _ratio(name: str, clusters: dict[Any, list[float]]) -> dict[str, Any]:
    k = sum(c[0] for c in clusters.values())
    n = sum(c[1] for c in clusters.values())
    low, high = intervals.ratio_interval([(c[0], c[1]) for c in clusters.values()])
    return {name: k / n if n else None, f"{name}_low": low, f"{name}_high": high}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


async def _report(store: EventStore, ev: Evaluation, states: list[CaseState],
                  outcome: str, fmt: str) -> int:
    scorer = await registration.active_scorer(store)
    scores = await _scores(store, states, scorer)  # (as the analysts' tables hold them)
    complete = all(s.state in DONE for s in states)
    open_cases = [s for s in states if s.state not in DONE]
    if fmt == "json":
        print(orjson.dumps({
            "name": ev.name, "version": ev.version, "outcome": outcome, "complete": complete,
            "scorer": scorer, "interval": intervals.METHOD,
            "counts": dict(Counter(s.state for s in states)),
            "cost_usd": sum(s.cost_usd for s in states), "critics": scores,
            "cases": [_case_json(s) for s in states]}).decode())
        return 0 if complete else EXIT_INCOMPLETE
    table = Table("definition", "model", "cases", "scored", "recall", "precision")
    for r in scores:
        table.add_row(r["definition"], r["model"], str(r["cases"]), str(r["scored"]),
                      f"{_pct(r['recall'])} [{_pct(r['recall_low'])}, "
                      f"{_pct(r['recall_high'])}]",
                      f"{_pct(r['precision'])} [{_pct(r['precision_low'])}, "
                      f"{_pct(r['precision_high'])}]")
    console.print(f"evaluation {ev.name} v{ev.version} under {scorer or 'no active scorer'}:",
                  markup=False)
    if scores:
        console.print(table)
        console.print(f"intervals: {intervals.METHOD}", markup=False)
    if open_cases:
        left = Table("state", "definition", "model", "snapshot", "epoch", "run", "why")
        for s in open_cases:
            left.add_row(s.state, s.case.definition, s.case.model, s.case.snapshot,
                         str(s.case.epoch), str(s.run_id)[:8] if s.run_id else "-",
                         _why(s))
        console.print(left)
    console.print(f"{ev.name}: {'complete' if complete else outcome.replace('_', ' ')}: "
                  + ", ".join(f"{n} {k}" for k, n in sorted(Counter(
                      s.state for s in states).items())), markup=False)
    return 0 if complete else EXIT_INCOMPLETE


def _why(s: CaseState) -> str:
    if s.failure is not None:
        code = f", exit {s.failure.exit_code}" if s.failure.exit_code is not None else ""
        return f"{s.failure.phase}: {s.failure.category}{code}"
    return {"missing": "no result: broken, never dropped", "waiting": "not requested yet",
            "running": "in flight"}.get(s.state, s.reason or "")


def _case_json(s: CaseState) -> dict[str, Any]:
    return {"key": s.case.key, "definition": s.case.definition, "model": s.case.model,
            "snapshot": s.case.snapshot, "file_set": s.case.file_set, "epoch": s.case.epoch,
            "state": s.state, "run_id": str(s.run_id) if s.run_id else None,
            "attempts": s.attempts, "cost_usd": s.cost_usd,
            "failure": s.failure.model_dump() if s.failure else None, "reason": s.reason}


# -- the commands -------------------------------------------------------------------------------


async def run_cmd(args: argparse.Namespace, store: EventStore) -> int:
    plan = evaluations.load_plan(args.plan)
    cases = await evaluations.resolve(store, plan)
    ev, resumed = await evaluations.start(store, plan, cases, new_version=args.new_version)
    console.print(f"evaluation {ev.name} v{ev.version}: {len(cases)} case(s) "
                  f"({'resumed: only what has no result is requested' if resumed else 'recorded'})",
                  markup=False)
    if args.detach:
        ceiling = await _ceiling(store, ev, None)
        states = await _states(store, ev, await registration.active_scorer(store))
        await _request_within(store, ev, dataclasses.replace(ceiling, runs=len(states)), [],
                              [s for s in states if s.state == "waiting"])
        console.print(f"requested; `props serve` runs them, `props eval show {ev.name}` "
                      f"says where they stand", markup=False)
        return 0
    async with container_runtimes(args.runtime) as runtimes:
        service = Service(store, runtimes, poll_interval=0.2)
        capacity = next((h.reactor.capacity for h in service.hosts
                         if isinstance(h.reactor, Launcher)), None)
        ceiling = await _ceiling(store, ev, capacity)
        console.print(f"at most {ceiling.runs} run(s) at once: {ceiling.why}", markup=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run, name="props-eval-service")
            outcome = await _drive(store, ev, args, ceiling)
            await _caught_up(store)
            tg.cancel_scope.cancel()
    states = await _states(store, ev, await registration.active_scorer(store), stopped=True)
    if outcome == "complete" and not all(s.state in DONE for s in states):
        outcome = "incomplete"
    await evaluations.end(store, ev, outcome, states)
    return await _report(store, ev, states, outcome, args.format)


async def show_cmd(args: argparse.Namespace, store: EventStore) -> int:
    ev = await evaluations.recorded(store, args.name)
    ended = any(isinstance(r.event, catalog.EvaluationEnded) and r.event.version == ev.version
                for r in await store.read_stream(streams.evaluation(ev.name)))
    states = await _states(store, ev, await registration.active_scorer(store), stopped=ended)
    outcome = "complete" if all(s.state in DONE for s in states) else "incomplete"
    return await _report(store, ev, states, outcome, args.format)


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    scorer = await registration.active_scorer(store)
    rows = []
    for name in await evaluations.names(store):
        ev = await evaluations.recorded(store, name)
        n = Counter(s.state for s in await _states(store, ev, scorer))
        rows.append({"name": name, "version": ev.version, "cases": len(ev.cases),
                     "scored": n["scored"], "failed": n["failed"],
                     "open": len(ev.cases) - n["scored"] - n["failed"] - n["excluded"]})
    if args.format == "json":
        print(orjson.dumps(rows).decode())
        return 0
    if not rows:
        console.print("no evaluations yet: props eval run PLAN.toml")
        return 0
    table = Table("evaluation", "version", "cases", "scored", "failed", "open")
    for r in rows:
        table.add_row(r["name"], str(r["version"]), str(r["cases"]), str(r["scored"]),
                      str(r["failed"]), str(r["open"]))
    console.print(table)
    return 0

"""What `props eval` does: the handlers that the parsers of `props.tools.commands.evaluations`
name. `run` drives an evaluation to its end (props.tools.evaluation_driver), printing a line
as the cases move, and ends with the evaluation's report, which `show` prints again."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson

from props.core.domain import catalog, evaluations, streams
from props.core.domain.evaluations import CaseState, Evaluation
from props.core.log.store import EventStore
from props.core.scoring import intervals, registration
from props.reactors.service import container_runtimes
from props.schema import queries
from props.tools import evaluation_driver as driver
from props.tools.commands.evaluations import EXIT_INCOMPLETE
from props.tools.render import Console, Table

console = Console(highlight=False)
_Q = queries.load("evaluations")


# -- the report ---------------------------------------------------------------------------------


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
    complete = all(s.state in driver.DONE for s in states)
    open_cases = [s for s in states if s.state not in driver.DONE]
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
        ceiling = await driver.ceiling_of(store, ev, None)
        states = await driver.case_states(store, ev, await registration.active_scorer(store))
        await driver.request_within(store, ev, dataclasses.replace(ceiling, runs=len(states)),
                                    [], [s for s in states if s.state == "waiting"])
        console.print(f"requested; `props serve` runs them, `props eval show {ev.name}` "
                      f"says where they stand", markup=False)
        return 0
    stops = driver.Stops(args.wait, args.fail_on_error, args.retry_failed)
    async with container_runtimes(args.runtime) as runtimes:
        driven = await driver.serve_until_done(
            store, ev, runtimes, stops, lambda line: console.print(line, markup=False))
    return await _report(store, ev, driven.states, driven.outcome, args.format)


async def show_cmd(args: argparse.Namespace, store: EventStore) -> int:
    ev = await evaluations.recorded(store, args.name)
    ended = any(isinstance(r.event, catalog.EvaluationEnded) and r.event.version == ev.version
                for r in await store.read_stream(streams.evaluation(ev.name)))
    states = await driver.case_states(store, ev, await registration.active_scorer(store),
                                      stopped=ended)
    outcome = "complete" if all(s.state in driver.DONE for s in states) else "incomplete"
    return await _report(store, ev, states, outcome, args.format)


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    scorer = await registration.active_scorer(store)
    rows = []
    for name in await evaluations.names(store):
        ev = await evaluations.recorded(store, name)
        n = Counter(s.state for s in await driver.case_states(store, ev, scorer))
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

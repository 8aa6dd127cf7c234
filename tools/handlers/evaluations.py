"""What `props eval` does: the handlers that the parsers of `props.tools.commands.evaluations`
name. `run` drives an evaluation to its end (props.tools.evaluation_driver), printing a line
as the cases move, and ends with the evaluation's report, which `show` prints again."""

from __future__ import annotations

import argparse
from collections import Counter

import orjson

from props.core.domain import catalog, evaluations, streams
from props.core.domain.evaluations import CaseState, Evaluation
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import intervals, registration
from props.projections import evaluation_scores
from props.reactors.service import container_runtimes
from props.tools import evaluation_driver as driver
from props.tools.commands.evaluations import EXIT_INCOMPLETE
from props.tools.render import Console, Table

console = Console(highlight=False)


# -- the report ---------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _with_interval(value: float | None, low: float | None, high: float | None) -> str:
    return f"{_pct(value)} [{_pct(low)}, {_pct(high)}]"


async def _report(store: EventStore, ev: Evaluation, states: list[CaseState],
                  outcome: str, fmt: str) -> int:
    scorer = await registration.active_scorer(store)
    scores = evaluation_scores.critic_rows(  # (as the analysts' tables hold them)
        await evaluation_scores.scored(store, states, scorer))
    complete = all(s.state in driver.DONE for s in states)
    open_cases = [s for s in states if s.state not in driver.DONE]
    if fmt == "json":
        print(orjson.dumps({
            "name": ev.name, "version": ev.version, "outcome": outcome, "complete": complete,
            "scorer": scorer, "interval": intervals.METHOD,
            "counts": dict(Counter(s.state for s in states)),
            "cost_usd": sum(s.cost_usd for s in states), "critics": scores,
            "cases": [evaluations.case_json(s) for s in states]}).decode())
        return 0 if complete else EXIT_INCOMPLETE
    table = Table("definition", "model", "cases", "scored", "recall", "precision")
    for r in scores:
        table.add_row(r["definition"], r["model"], str(r["cases"]), str(r["scored"]),
                      *(_with_interval(r[m], r[f"{m}_low"], r[f"{m}_high"])
                        for m in ("recall", "precision")))
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


# -- the commands -------------------------------------------------------------------------------


async def run_cmd(args: argparse.Namespace, store: EventStore) -> int:
    plan = evaluations.load_plan(args.plan)
    cases = await evaluations.resolve(store, plan)
    ev, resumed = await evaluations.start(store, plan, cases, new_version=args.new_version)
    console.print(f"evaluation {ev.name} v{ev.version}: {len(cases)} case(s) "
                  f"({'resumed: only what has no result is requested' if resumed else 'recorded'})",
                  markup=False)
    if args.detach:
        await driver.request_detached(store, ev)
        console.print(f"requested; `props serve` runs them, `props eval watch {ev.name}` "
                      f"follows them (`props eval show {ev.name}`: where they stand now)",
                      markup=False)
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


async def watch_cmd(args: argparse.Namespace, store: EventStore) -> int:
    ev = await evaluations.recorded(store, args.name)
    await driver.watch(store, ev, lambda line: console.print(line, markup=False), args.wait)
    return await show_cmd(args, store)


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


# -- comparing two critics ------------------------------------------------------------------


async def _side(store: EventStore, spec: str, scorer: str | None,
                ) -> tuple[str, evaluation_scores.Scored, str | None]:
    """EVAL or EVAL:DEFINITION: the evaluation's scored sums, and the definition named."""
    name, _, definition = spec.partition(":")
    ev = await evaluations.recorded(store, name)
    found = await evaluation_scores.scored(store, await driver.case_states(store, ev, scorer),
                                           scorer)
    if definition and not any(d == definition for d, _m in found.sums):
        raise errors.NotFound(f"evaluation {name} has no critic {definition}; its critics: "
                              + ", ".join(sorted({d for d, _m in found.sums})))
    return name, found, definition or None


def _pairs(a: evaluation_scores.Scored, a_def: str | None, b: evaluation_scores.Scored,
           b_def: str | None) -> list[tuple[evaluation_scores.Critic, evaluation_scores.Critic]]:
    """Which critic of A meets which of B: the two named, else each critic both have."""
    if (a_def is None) != (b_def is None):
        raise errors.PropsError("name a critic on both sides (EVAL:DEFINITION) or on neither")
    if a_def is None:
        return [(c, c) for c in sorted(set(a.sums) & set(b.sums))]
    a_critics = [c for c in a.sums if c[0] == a_def]
    b_critics = [c for c in b.sums if c[0] == b_def]
    if len(a_critics) != 1 or len(b_critics) != 1:
        raise errors.PropsError(f"{a_def} or {b_def} is several critics (one per model): "
                                f"compare the evaluations whole")
    return [(a_critics[0], b_critics[0])]


async def compare_cmd(args: argparse.Namespace, store: EventStore) -> int:
    scorer = await registration.active_scorer(store)
    a_name, a, a_def = await _side(store, args.a, scorer)
    b_name, b, b_def = await _side(store, args.b, scorer)
    rows = []
    for ca, cb in _pairs(a, a_def, b, b_def):
        rows.append({"a": {"evaluation": a_name, "definition": ca[0], "model": ca[1]},
                     "b": {"evaluation": b_name, "definition": cb[0], "model": cb[1]},
                     **evaluation_scores.paired(a.sums[ca], b.sums[cb])})
    if args.format == "json":
        print(orjson.dumps({"a": args.a, "b": args.b, "scorer": scorer,
                            "interval": intervals.METHOD, "pairs": rows}).decode())
        return 0 if rows else 1
    if not rows:
        console.print(f"{args.a} and {args.b} share no critic: name one on each side "
                      f"(EVAL:DEFINITION)", markup=False)
        return 1
    table = Table("A", "B", "examples", "recall A", "recall B", "B - A",
                  "precision A", "precision B", "B - A")
    for r in rows:
        table.add_row(
            f"{r['a']['evaluation']}:{r['a']['definition']}",
            f"{r['b']['evaluation']}:{r['b']['definition']}",
            f"{r['examples']}" + (f" (+{r['only_a']} A, +{r['only_b']} B)"
                                  if r["only_a"] or r["only_b"] else ""),
            *(cell for m in ("recall", "precision") for cell in (
                _pct(r[f"{m}_a"]), _pct(r[f"{m}_b"]),
                _with_interval(r[f"{m}_delta"], r[f"{m}_delta_low"], r[f"{m}_delta_high"])
                + ("*" if r[f"{m}_significant"] else ""))))
    console.print(f"under {scorer or 'no active scorer'}, over the examples both scored:",
                  markup=False)
    console.print(table)
    console.print(f"B - A: a paired {intervals.METHOD}; * where the interval excludes 0; "
                  "examples only one side scored are counted, not paired", markup=False)
    return 0

"""What `props eval` does: the handlers that the parsers of
`props.tools.command_line.commands.evaluations` name. `run` drives an evaluation to its end
(props.reactors.evaluation_driver), printing a line as the cases move, and ends with the
evaluation's report, which `show` prints again."""

from __future__ import annotations

import argparse
from collections import Counter
from functools import partial
from typing import Any

import orjson
from rich.text import Text

from props.core.domain import caps, evaluation_starts, evaluations
from props.core.domain.evaluations import CaseState
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import intervals, registration
from props.projections import evaluation_scores, evaluation_standing
from props.reactors import evaluation_driver as driver
from props.reactors.service import container_runtimes
from props.tools.command_line import render, run_warnings
from props.tools.command_line.commands.evaluations import EXIT_INCOMPLETE
from props.tools.command_line.figure_tables import (
    bounds,
    chance_lines,
    confirmation_lines,
    critic_columns,
    figure_columns,
    figure_notes,
    percent,
    with_interval,
)
from props.tools.command_line.render import Column, Console, print_table

console = Console()


# -- the report ---------------------------------------------------------------------------------


async def _report(standing: evaluation_standing.Standing, fmt: str, wide: bool = False,
                  outcome: str | None = None) -> int:
    """Render the evaluation's standing (props.projections.evaluation_standing); `outcome`:
    how the drive that just ended left it, if one did."""
    ev, states, scorer = standing.ev, standing.states, standing.scorer
    scores, complete, open_cases = standing.critics, standing.complete, standing.open_cases
    outcome = outcome or standing.outcome
    if fmt == "json":
        print(orjson.dumps({**standing.as_json(), "outcome": outcome}).decode())
        return 0 if complete else EXIT_INCOMPLETE
    console.print(f"evaluation {ev.name} v{ev.version} under {scorer or 'no active scorer'}:")
    if standing.scorer_from == "origin":
        console.print(Text(
            f"(brought by an import: judged under the scorer its origin had active; that "
            f"activation is history here and never this database's active scorer, which is "
            f"{standing.active or 'none'})"))
    if scores:
        print_table(console, figure_columns(scores, wide, optional_model=False), scores,
                    wide=wide)
        for line in figure_notes(scores, scorer):
            console.print(Text(line))
        console.print(f"intervals: {intervals.METHOD}")
        for line in [*confirmation_lines([{**r, "scorer": scorer} for r in scores],
                                         {k: standing.as_json()[k]
                                          for k in ("confirmed_by", "reviewed_by")}),
                     *chance_lines([{**r, "scorer": scorer} for r in scores])]:
            console.print(Text(line))
    listed = states if len(states) <= CASES_LISTED else open_cases
    if listed:
        rows = [{"state": s.state, "definition": s.case.definition, "model": s.case.model,
                 "snapshot": s.case.snapshot, "epoch": s.case.epoch,
                 "run": str(s.run_id)[:8] if s.run_id else "-", "why": _why(s)}
                for s in listed]
        # The epoch tells two cases of one critic and example apart: it stays, and `why`
        # wraps (an empty one is left out) rather than the table turning into records.
        print_table(console, [
            Column("state", "state"), *critic_columns(rows, optional_model=True),
            Column("snapshot", "snapshot"), Column("epoch", "epoch", justify="right"),
            Column("run", "run"), Column("why", "why", prose=True)], rows, wide=wide,
            title="cases" if listed is states else
            f"cases without a result ({len(states) - len(open_cases)} with one are not "
            f"listed: --format json lists every case)")
    console.print(f"{ev.name}: {'complete' if complete else outcome.replace('_', ' ')}: "
                  + ", ".join(f"{n} {k}" for k, n in sorted(standing.counts.items())))
    return 0 if complete else EXIT_INCOMPLETE


CASES_LISTED = 50  # up to this many cases, the report lists them all (else the open ones)


def _why(s: CaseState) -> str:
    if s.failure is not None:
        code = f", exit {s.failure.exit_code}" if s.failure.exit_code is not None else ""
        cap = caps.said(s.failure, s.case.definition, short=True)
        return f"{s.failure.phase}: {s.failure.category}{code}" + (f"; {cap}" if cap else "")
    return {"missing": "no result: broken, never dropped", "waiting": "not requested yet",
            "running": "in flight"}.get(s.state, s.reason or "")


# -- the commands -------------------------------------------------------------------------------


def _detached(name: str, now: driver.Look, retry_failed: int) -> str:
    """What `--detach` requested, and what it did not and why, in one line or two."""
    counts = Counter(s.state for s in now.states)
    done = ", ".join(f"{counts[k]} {k}" for k in ("scored", "excluded", "running", "failed")
                     if counts[k])
    said = (f"requested {now.requested} run(s) ({now.requested - now.retried} case(s) "
            f"without a result, {now.retried} failed case(s) again), within the plan's ceiling; "
            f"{done or 'no case has a result yet'}. `props serve` runs them and the rest, "
            f"`props eval watch {name}` follows them")
    if not now.requested and now.outcome != "complete":
        said += f"\nnothing requested: {now.outcome.replace('_', ' ')}"
    if retry_failed and (now.retried or now.not_retried):
        said += "\n" + driver.retry_line(now.retried, now)
    return said


def _progress(args: argparse.Namespace) -> Console:
    """Where a command's running account goes: stdout, but stderr when stdout is one JSON
    document for a program."""
    return Console(stderr=True) if args.format == "json" else console


async def run_cmd(args: argparse.Namespace, store: EventStore) -> int:
    plan = evaluations.load_plan(args.plan)
    cases = await evaluations.resolve(store, plan)
    ev, resumed = await evaluation_starts.start(store, plan, cases, new_version=args.new_version)
    say = _progress(args)
    say.print(f"evaluation {ev.name} v{ev.version}: {len(cases)} case(s) "
                  f"({'resumed: only what has no result is requested' if resumed else 'recorded'})")
    if args.detach:
        now = await driver.first_look(store, ev, stops=driver.Stops(
            retry_failed=args.retry_failed))
        say.print(_detached(ev.name, now, args.retry_failed))
        return 0
    stops = driver.Stops(args.wait, args.fail_on_error, args.retry_failed)
    with run_warnings.held() as held:
        async with container_runtimes(args.runtime) as runtimes:
            driven = await driver.serve_until_done(
                store, ev, runtimes, stops, lambda line: say.print(line))
    for line in held.lines():  # each kind of a run's trouble once, not once per run
        say.print(Text(line))
    return await _report(await evaluation_standing.of(store, ev), args.format, args.wide,
                         driven.outcome)


async def show_cmd(args: argparse.Namespace, store: EventStore) -> int:
    standing = await evaluation_standing.named(store, args.name)
    return await _report(standing, args.format, args.wide)


async def watch_cmd(args: argparse.Namespace, store: EventStore) -> int:
    ev = await evaluations.recorded(store, args.name)
    await driver.watch(store, ev, lambda line: _progress(args).print(line), args.wait)
    return await show_cmd(args, store)


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    rows = []
    for name in await evaluations.names(store):
        standing = await evaluation_standing.named(store, name, figures=False)
        ev, n = standing.ev, Counter(standing.counts)
        rows.append({"name": name, "version": ev.version, "cases": len(ev.cases),
                     "scored": n["scored"], "failed": n["failed"],
                     "open": len(ev.cases) - n["scored"] - n["failed"] - n["excluded"]})
    render.emit(args, rows, [
        Column("name", "evaluation"), Column("version", "version", justify="right"),
        *(Column(k, k, justify="right") for k in ("cases", "scored", "failed", "open"))],
        empty="no evaluations yet: props eval run PLAN.toml")
    return 0


# The measures two critics are compared on, as their headers name them.
_SHOWN = {"located_recall": "located", "precision": "precision"}
PER_EXAMPLE_SHOWN = 30  # examples a pair's table lists (--format json has every one)


def _per_example(r: dict[str, Any], wide: bool) -> None:
    """One pair's examples side by side: what the paired interval resamples."""
    shown = r["per_example"][:PER_EXAMPLE_SHOWN]
    more = len(r["per_example"]) - len(shown)
    print_table(console, [
        Column("snapshot", "example", shows=lambda e: e["snapshot"] + (
            f" ({e['files_hash'][:8]})" if e["files_hash"] else "")),
        *(Column(f"{m}_{side}", f"{_SHOWN[m]} {side.upper()}", percent, justify="right",
                 short=f"{m[0].upper()} {side.upper()}")
          for m in _SHOWN for side in ("a", "b"))], shown, wide=wide,
        title=f"per example, {r['a']['evaluation']}:{r['a']['definition']} (A) and "
              f"{r['b']['evaluation']}:{r['b']['definition']} (B)"
              + (f"; {more} more: --format json" if more else ""))


def _chance_lines(r: dict[str, Any]) -> list[str]:
    """Each side's chance level and recall above it, a line each (the table has no room for
    four more columns at 80)."""
    return [
        f"{side.upper()} {r[side]['evaluation']}:{r[side]['definition']}: " + (
            "no chance level (a run's is not recorded: props rescore)"
            if r[f"chance_{side}"] is None else
            f"chance {percent(r[f'chance_{side}'])}, above chance "
            f"{bounds(r, f'above_chance_{side}')}") for side in ("a", "b")]


# -- comparing two critics ------------------------------------------------------------------


async def _side(store: EventStore, spec: str, scorer: str | None,
                ) -> tuple[str, evaluation_scores.Scored, str | None]:
    """EVAL or EVAL:DEFINITION: the evaluation's scored sums, and the definition named."""
    name, _, definition = spec.partition(":")
    ev = await evaluations.recorded(store, name)
    found = await evaluation_scores.scored(
        store, name, await driver.case_states(store, ev, scorer), scorer)
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
                     **evaluation_scores.paired(a.sums[ca], b.sums[cb], (
                         a.chance_missing.get(ca, 0), b.chance_missing.get(cb, 0)))})
    if args.format == "json":
        print(orjson.dumps({"a": args.a, "b": args.b, "scorer": scorer,
                            "interval": intervals.METHOD, "pairs": rows}).decode())
        return 0 if rows else 1
    if not rows:
        console.print(f"{args.a} and {args.b} share no critic: name one on each side "
                      f"(EVAL:DEFINITION)")
        return 1
    console.print(f"under {scorer or 'no active scorer'}, over the examples both scored:")
    print_table(console, [
        Column("a", "A", lambda c: f"{c['evaluation']}:{c['definition']}"),
        *([Column("a_model", "model A", shows=lambda r: r["a"]["model"])]
          if any(r["a"]["model"] != r["a"]["definition"] for r in rows) else []),
        Column("b", "B", lambda c: f"{c['evaluation']}:{c['definition']}"),
        *([Column("b_model", "model B", shows=lambda r: r["b"]["model"])]
          if any(r["b"]["model"] != r["b"]["definition"] for r in rows) else []),
        Column("examples", "examples", optional=True),
        *(column for m, named in _SHOWN.items() for column in (
            # (precision where there is room: the located figures first, at any width)
            Column(f"{m}_a", f"{named} A", shows=partial(with_interval, measure=f"{m}_a"),
                   short=f"{m[0].upper()} A", optional=m == "precision"),
            Column(f"{m}_b", f"{named} B", shows=partial(with_interval, measure=f"{m}_b"),
                   short=f"{m[0].upper()} B", optional=m == "precision"),
            Column(f"{m}_delta", f"{named} B - A", short=f"Δ{m[0].upper()}",
                   optional=m == "precision")))], [
        {**r, "examples": f"{r['examples']}" + (f" (+{r['only_a']} A, +{r['only_b']} B)"
                                                 if r["only_a"] or r["only_b"] else ""),
         **{f"{m}_delta": with_interval(r, f"{m}_delta")
            + ("*" if r[f"{m}_significant"] else "") for m in _SHOWN}}
        for r in rows], wide=args.wide)
    for r in rows:
        for line in _chance_lines(r):
            console.print(Text(line))
        _per_example(r, args.wide)
    console.print(f"B - A: a paired {intervals.METHOD}; * where the interval excludes 0; "
                  "examples only one side scored are counted, not paired")
    return 0

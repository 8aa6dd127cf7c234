"""What `props bench` does: the handlers that the parsers of
`props.tools.command_line.commands.bench` name."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable

from props.core.log import database
from props.tools.checks import scratch
from props.tools.checks.benchmarks import (
    cli_suite,
    eval_suite,
    export_suite,
    log_suite,
    projections_suite,
    reactors_suite,
    rescore_suite,
    scale_suite,
    viewer_suite,
)
from props.tools.checks.benchmarks.report import HEADROOM, Report, Rounds
from props.tools.command_line.render import Column, Console, print_table

SUITES: dict[str, Callable[[str, bool, Console], Awaitable[Report]]] = {
    "cli": cli_suite.run,
    "eval": eval_suite.run,
    "log": log_suite.run,
    "projections": projections_suite.run,
    "rescore": rescore_suite.run,
    "export": export_suite.run,
    "reactors": reactors_suite.run,
    "viewer": viewer_suite.run,
}


console = Console(stderr=True, highlight=False)
MAX_ROUNDS = 20  # a full round of some suites takes minutes


async def bench_cmd(args: argparse.Namespace) -> int:
    for flag, suite in (("peers", "log"), ("scale", "projections")):
        if getattr(args, flag) and args.suite != suite:
            console.print(f"props bench: --{flag} is a mode of the {suite} suite only "
                          f"(props bench {suite} --{flag})", soft_wrap=True)
            return 2
    if args.scale_upto and not args.scale:
        console.print("props bench: --scale-upto goes with --scale", soft_wrap=True)
        return 2
    if not 1 <= args.rounds <= MAX_ROUNDS:
        console.print(f"props bench: --rounds takes a whole number from 1 to {MAX_ROUNDS}",
                      soft_wrap=True)
        return 2
    server = database.resolve_dsn()
    rounds = Rounds(args.suite, args.quick)
    several = args.rounds > 1  # (one round prints and summarises as it always has)
    for n in range(1, args.rounds + 1):
        of_rounds = f"round {n} of {args.rounds}" if several else ""
        if several:
            console.print(of_rounds)
        # Each round in a scratch database of its own, as a single run is.
        async with scratch.scratch_database(server, "bench") as dsn:
            report = await _one_round(args, dsn)
        rounds.reports.append(report)
        rounds.loads.append(os.getloadavg()[0])
        _print_report(report, ", ".join(filter(None, [f"bench {report.suite}", of_rounds])))
    if several:
        _print_rounds(rounds)
    if args.json:
        print(rounds.json_line() if several else report.json_line(), flush=True)
    return 0 if rounds.passed else 1


async def _one_round(args: argparse.Namespace, dsn: str) -> Report:
    if args.peers:
        return await log_suite.run(dsn, args.quick, console, peers=True)
    if args.scale:
        return await scale_suite.run(dsn, args.quick, console, upto=args.scale_upto)
    return await SUITES[args.suite](dsn, args.quick, console)


def _value(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _threshold(x: float) -> str:
    """A headroom target as it is judged (1.35, 0.88, 55,000), never rounded past it (it is
    held to six places: report.with_headroom)."""
    return f"{x:,.6f}".rstrip("0").rstrip(".")


def _print_report(report: Report, title: str) -> None:
    print_table(console, [
        Column("name", "check"),
        Column("value", "value", _value, justify="right"),
        Column("target", "target"), Column("verdict", "verdict")],
        [{"name": c.name, "value": c.value, "target": f"{c.op} {c.target}",
          "verdict": c.verdict} for c in report.checks], title=title)
    for c in report.checks:
        if c.reason:
            console.print(f"{c.name}: {c.verdict}: {c.reason}", soft_wrap=True)


def _print_rounds(rounds: Rounds) -> None:
    """Every round's value of each check side by side, and whether it held with headroom."""
    print_table(console, [
        Column("name", "check"), Column("values", "rounds"),
        Column("target", "target"), Column("headroom", "with headroom"),
        Column("verdict", "verdict")],
        [{"name": h.name, "values": " ".join(_value(v) for v in h.values),
          "target": f"{h.op} {h.target}",
          "headroom": f"{h.op} {_threshold(h.headroom_target)}",
          "verdict": h.verdict} for h in rounds.held()],
        title=f"bench {rounds.suite}: {len(rounds.reports)} rounds, load after each "
              + " ".join(f"{x:.1f}" for x in rounds.loads))
    console.print(f"HELD: every round passed by {HEADROOM:.0%} or more; PASS: every round "
                  "passed; FAIL: a round did not; NORUN: a round did not run it",
                  soft_wrap=True)

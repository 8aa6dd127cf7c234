"""What `props bench` does: the handlers that the parsers of
`props.tools.command_line.commands.bench` name."""

from __future__ import annotations

import argparse
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
from props.tools.checks.benchmarks.report import Report
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


async def bench_cmd(args: argparse.Namespace) -> int:
    for flag, suite in (("peers", "log"), ("scale", "projections")):
        if getattr(args, flag) and args.suite != suite:
            console.print(f"props bench: --{flag} is a mode of the {suite} suite only "
                          f"(props bench {suite} --{flag})", soft_wrap=True)
            return 2
    if args.scale_upto and not args.scale:
        console.print("props bench: --scale-upto goes with --scale", soft_wrap=True)
        return 2
    server = database.resolve_dsn()
    async with scratch.scratch_database(server, "bench") as dsn:
        if args.peers:
            report = await log_suite.run(dsn, args.quick, console, peers=True)
        elif args.scale:
            report = await scale_suite.run(dsn, args.quick, console, upto=args.scale_upto)
        else:
            report = await SUITES[args.suite](dsn, args.quick, console)
    print_table(console, [
        Column("name", "check"),
        Column("value", "value", lambda v: "-" if v is None else f"{v:.3f}", justify="right"),
        Column("target", "target"), Column("verdict", "verdict")],
        [{"name": c.name, "value": c.value, "target": f"{c.op} {c.target}",
          "verdict": c.verdict} for c in report.checks], title=f"bench {report.suite}")
    for c in report.checks:
        if c.reason:
            console.print(f"{c.name}: {c.verdict}: {c.reason}", soft_wrap=True)
    if args.json:
        print(report.json_line(), flush=True)
    return 0 if report.passed else 1

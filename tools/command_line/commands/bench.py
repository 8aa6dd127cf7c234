"""`props bench SUITE`: run a benchmark suite on a scratch database and report the checks."""

from __future__ import annotations

from typing import Any

# The suites `props.tools.command_line.handlers.bench` runs (a test checks the two agree).
SUITE_NAMES = ("cli", "eval", "export", "log", "projections", "reactors", "rescore", "viewer")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="measure props against raw PostgreSQL",
        description="Run a benchmark suite on a scratch database (created and dropped on the "
        "server props uses). Every figure is measured side by side with the raw PostgreSQL "
        "operation it is built on, in the same run; the checks are ratios. Exit 0 when every "
        "check passes, 1 when one fails or did not run, 2 when --peers or --scale is given "
        "to a suite that has no such mode. Ratios move with the machine's load: run "
        "--rounds 3 to see how far.",
    )
    p.add_argument("suite", choices=sorted(SUITE_NAMES), help="which suite")
    p.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary as the last line of standard output")
    p.add_argument("--peers", action="store_true",
                   help="log only: the same appends and reads through the eventsourcing "
                   "library's PostgreSQL recorder and Message DB in the same run, as ratios "
                   "of props to each (NORUN for a peer that cannot be installed)")
    p.add_argument("--scale", action="store_true",
                   help="projections only: rebuild, rescore and report at 10^4, 10^5 and 10^6 "
                   "events (--quick stops at 10^5), each size's cost per event against "
                   "10^4's, with the memory peaks")
    p.add_argument("--scale-upto", type=int, choices=(10_000, 100_000, 1_000_000),
                   metavar="EVENTS", help="with --scale: the largest size (10000, 100000 or "
                   "1000000); at 10000 alone nothing is compared and the checks say NORUN")
    p.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="run the suite N times in a row, each round in a scratch database "
                   "of its own, then show each check's N values side by side with the "
                   "machine's load after each round: HELD when every round passed by 10%% "
                   "or more, PASS when every round passed. Exit 0 only when every round "
                   "passed. With --json the last line holds every round")
    p.set_defaults(handler="bench:bench_cmd")

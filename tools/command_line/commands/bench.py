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
        "check passes, 1 when one fails or did not run.",
    )
    p.add_argument("suite", choices=sorted(SUITE_NAMES), help="which suite")
    p.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary as the last line of standard output")
    p.set_defaults(handler="bench:bench_cmd")

"""`props bench cli`: how long a command takes to start, against importing its two heaviest
dependencies.

Each round starts three processes, interleaved so a busy moment of the machine falls on all
of them: `props --version`, `props runs list --help` (a command's parser, nothing run), and
`python -c "import asyncpg, pydantic"` (the raw floor: any command that reaches the database
imports both). The figures are medians; the checks are ratios to the floor.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from props.tools.checks.benchmarks.report import Check, Report
from props.tools.command_line.render import Console

PROPS = [sys.executable, "-m", "props.tools.cli"]
RUNS = {
    "version": [*PROPS, "--version"],
    "runs_list_help": [*PROPS, "runs", "list", "--help"],
    "imports": [sys.executable, "-c", "import asyncpg, pydantic"],
}


def _seconds(command: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


async def run(dsn: str, quick: bool, console: Console) -> Report:
    del dsn  # no database: starting is all this measures
    rounds = 5 if quick else 21
    report = Report("cli", quick)
    took: dict[str, list[float]] = {name: [] for name in RUNS}
    console.print(f"starting each command {rounds} times ...")
    for command in RUNS.values():  # warm the file cache (and .pyc files) once
        _seconds(command)
    for _ in range(rounds):
        for name, command in RUNS.items():
            took[name].append(_seconds(command))
    median = {name: statistics.median(values) for name, values in took.items()}
    report.figures.update({f"{name}_seconds": round(m, 4) for name, m in median.items()})
    report.figures["rounds"] = rounds
    report.checks.append(Check("version_vs_imports", median["version"] / median["imports"],
                               "<=", 1.5))
    report.checks.append(Check("startup_vs_imports",
                               median["runs_list_help"] / median["imports"], "<=", 1.5))
    return report

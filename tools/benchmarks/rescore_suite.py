"""`props bench rescore`: re-score recorded runs end to end, against a raw read of the issues.

The log holds critic runs of 100 issues each, graded by overlap@1. Re-scoring them all with
overlap@2 is timed from the start of the rescore until the live projection runner has
projected every new grade (read, grade, append, project); the raw baseline reads the same
issue events in position order and decodes them with orjson. A dry run (read and grade,
nothing written) is timed first: the share of the Python side alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import anyio
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from props.core import rescoring, scoring
from props.core.store import EventStore
from props.projections import engine
from props.tools.benchmarks.report import Check, Report
from props.tools.workload import Workload

RAW_ISSUES = (
    "SELECT global_position, data, metadata FROM props.events "
    "WHERE type = 'issue.reported' AND global_position > $1 ORDER BY global_position LIMIT $2"
)


async def _raw_issue_read(store: EventStore) -> tuple[int, float]:
    t0 = time.perf_counter()
    n, last = 0, 0
    while True:
        page = await store.pool.fetch(RAW_ISSUES, last, 1000)
        if not page:
            return n, time.perf_counter() - t0
        for r in page:
            orjson.loads(r[1])
            orjson.loads(r[2])
        n += len(page)
        last = page[-1][0]


async def run(dsn: str, quick: bool, console: Console) -> Report:
    runs = 500 if quick else 10_000
    report = Report("rescore", quick)
    async with EventStore.open(dsn, max_connections=6) as store:
        work = Workload(seed=8, issues_per_run=(100, 100))
        await work.setup(store)
        with Progress(TextColumn("generating runs of 100 issues"), BarColumn(),
                      MofNCompleteColumn(), console=console, transient=True) as bar:
            task = bar.add_task("generate", total=runs)
            await work.append_runs(store, runs, progress=lambda _n: bar.advance(task, 1))
        # Both sides read with fresh planner statistics: a plan made before them read the
        # raw side's pages by bitmap scan and sort (59,000 instead of 465,000 issues/s).
        await store.analyze_stale_partitions()
        await engine.rebuild(store)
        issues = await store.pool.fetchval("SELECT count(*) FROM projections.reported_issues")
        report.figures["runs"] = runs
        report.figures["issues"] = issues
        raw_n, raw_s = await _raw_issue_read(store)
        # Reading and grading alone, nothing written: what the Python side costs by itself.
        console.print(f"re-scoring {issues:,} issues with overlap@2, dry run ...")
        t0 = time.perf_counter()
        dry = await rescoring.rescore(store, scoring.scorer("overlap@2"),
                                      rescoring.Selection(everything=True), dry_run=True)
        dry_rate = dry.grades / (time.perf_counter() - t0)
        console.print(f"re-scoring {issues:,} issues with overlap@2 ...")
        # The projection runner is its own service, as deployed (`props projections run`).
        runner = await anyio.open_process(
            [sys.executable, "-m", "props.tools.cli", "projections", "run"],
            env={**os.environ, "PROPS_DSN": dsn}, stdout=subprocess.DEVNULL)
        try:
            assert runner.stderr is not None
            ready = b""
            while b"\n" not in ready:  # it prints a line once it is up
                ready += await runner.stderr.receive()
            t0 = time.perf_counter()
            result = await rescoring.rescore(store, scoring.scorer("overlap@2"),
                                             rescoring.Selection(everything=True))
            graded_at = time.perf_counter() - t0
            with anyio.fail_after(600):
                while any(s.lag_events for s in await engine.status(store)):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            seconds = time.perf_counter() - t0
        finally:
            runner.send_signal(signal.SIGTERM)
            await runner.wait()
        raw2_n, raw2_s = await _raw_issue_read(store)
        raw_rate = (raw_n + raw2_n) / (raw_s + raw2_s)
        rate = result.grades / seconds
        report.figures.update({
            "grades": result.grades, "seconds_to_append": round(graded_at, 2),
            "seconds_to_project": round(seconds, 2), "rescore_issues_per_s": round(rate),
            "raw_issue_read_per_s": round(raw_rate),
            "dry_run_issues_per_s": round(dry_rate),
            "dry_run_vs_raw_read": round(dry_rate / raw_rate, 3),
        })
        report.checks.append(Check("rescore_issues_per_s", rate, ">=", 20_000,
                                   unit="issues/s"))
        report.checks.append(Check("rescore_vs_raw_read", rate / raw_rate, ">=", 0.3))
    return report

"""`props bench projections --scale`: what a rebuild, a rescore and a report cost per event
as the log grows from 10^4 to 10^5 and 10^6 events.

Each size gets a database of its own with a log generated as the projections suite makes it
(critic runs with issues, LLM calls and grades: the realistic mix), then, in that order: a raw
read of the whole log (keyset pages, orjson: the machine's pace at that size), a rebuild of
every projection, a rescore of every run with overlap@2 until the runner (its own process) has
projected every grade, and `props report --scorer overlap@2` (best of three, checked against
the raw aggregate as in the rescore suite). Each cost is divided by the log's events; its
growth is that per-event cost over 10^4's (linear work: 1.0; the goal at the largest size is
<= 1.5). A small log carries the fixed costs (creating and analyzing tables, planning), so a
growth below 1 is expected; `*_growth_step` (against the size 10x smaller) shows a cost that
grows faster than the log once they are spread. Beside each: the growth of the raw read's
per-event cost (so a busy machine shows as both growing), and the memory peaks of the phase
(benchmarks/memory.py).
"""

from __future__ import annotations

import time
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from props.core.domain.store import open_store
from props.projections import engine
from props.tools.checks import scratch
from props.tools.checks.benchmarks import memory, rescore_suite
from props.tools.checks.benchmarks.log_suite import raw_read_all
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.checks.workload import Workload
from props.tools.command_line.render import Column, Console, print_table

SIZES = (10_000, 100_000, 1_000_000)
PHASES = ("rebuild", "rescore", "report")
GROWTH_TARGET = 1.5


def _mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


async def _one_size(server_dsn: str, size: int, console: Console) -> dict[str, Any]:
    async with scratch.scratch_database(server_dsn, "benchscale") as dsn, \
            open_store(dsn, max_connections=6) as store:
        work = Workload(seed=42)
        events = await work.setup(store)
        with Progress(TextColumn(f"generating {size:,} events"), BarColumn(),
                      MofNCompleteColumn(), TextColumn("events"), console=console,
                      transient=True) as bar:
            task = bar.add_task("generate", total=size, completed=events)
            while events < size:
                events += await work.append_runs(store, 50,
                                                 progress=lambda n: bar.advance(task, n))
        await store.analyze_stale_partitions()
        sampler = await memory.server_sampler(store.pool)
        console.print(f"{events:,} events: raw read, rebuild, rescore, report ...")
        _n, raw_s = await raw_read_all(store.pool)
        seconds: dict[str, float] = {}
        process: dict[str, int | None] = {}
        server: dict[str, int | None] = {}
        resettable = memory.reset_peak()
        out: dict[str, Any] = {"events": events}

        async def phase(name: str) -> float:
            memory.reset_peak()
            async with sampler.sampling():
                if name == "rebuild":
                    took = (await engine.rebuild(store)).seconds
                elif name == "rescore":
                    projected = await rescore_suite.rescore_until_projected(store, dsn)
                    took = projected.seconds
                    out["runner_peak_mib"] = _mib(projected.runner_peak_kib)
                    out["grades"] = projected.result.grades
                else:
                    took, _raw, out["report_runs"], _edges = await rescore_suite.time_report(
                        store)
            process[name] = memory.peak_kib() if resettable else None
            server[name] = sampler.peak_kib if sampler.postmaster is not None else None
            return took

        for name in PHASES:
            console.print(f"  {name} ...")
            seconds[name] = await phase(name)
        out["raw_read_us_per_event"] = round(raw_s / events * 1e6, 3)
        for name in PHASES:
            out[f"{name}_us_per_event"] = round(seconds[name] / events * 1e6, 3)
            out[f"{name}_process_peak_mib"] = _mib(process[name])
            out[f"{name}_server_private_peak_mib"] = _mib(server[name])
        out["memory_notes"] = [note for note in (
            None if resettable else "this process's peak could not be reset per phase "
            f"(lifetime peak {_mib(memory.lifetime_peak_kib())} MiB)",
            sampler.reason) if note]
        return out


async def run(dsn: str, quick: bool, console: Console, *, upto: int | None = None) -> Report:
    largest = upto or (SIZES[1] if quick else SIZES[-1])
    sizes = [n for n in SIZES if n <= largest]
    report = Report("projections", quick)
    report.figures["mode"] = "scale"
    rows: list[dict[str, Any]] = []
    for size in sizes:
        t0 = time.perf_counter()
        row = await _one_size(dsn, size, console)
        base = rows[0] if rows else row
        before = rows[-1] if rows else row
        for name in (*PHASES, "raw_read"):
            row[f"{name}_growth"] = round(
                row[f"{name}_us_per_event"] / base[f"{name}_us_per_event"], 3)
            # Against the size before (10x smaller): once the fixed costs are spread, the
            # step that shows a cost growing faster than the log.
            row[f"{name}_growth_step"] = round(
                row[f"{name}_us_per_event"] / before[f"{name}_us_per_event"], 3)
        row["size"] = size
        rows.append(row)
        console.print(f"  10^{len(str(size)) - 1} done in {time.perf_counter() - t0:.0f} s; per "
                      "event against 10^4: " + ", ".join(
                          f"{name} x{row[f'{name}_growth']:.2f}" for name in (*PHASES,
                                                                              "raw_read")))
    report.figures["sizes"] = rows
    print_table(console, [
        Column("size", "events", lambda v: f"{v:,}", justify="right"),
        *(Column(f"{p}_growth", f"{p} x", lambda v: f"{v:.2f}", justify="right")
          for p in (*PHASES, "raw_read")),
        *(Column(f"{p}_process_peak_mib", f"{p} MiB", lambda v: "-" if v is None else f"{v:,.0f}",
                 justify="right") for p in PHASES),
        Column("rescore_server_private_peak_mib", "server MiB",
               lambda v: "-" if v is None else f"{v:,.0f}", justify="right"),
    ], rows, title="cost per event against 10^4 (x), and memory peaks")
    top = rows[-1]
    one = None if len(rows) > 1 else f"only {sizes[0]:,} events measured: nothing to compare"
    for name in PHASES:
        report.checks.append(Check(f"{name}_cost_growth", None if one else top[f"{name}_growth"],
                                   "<=", GROWTH_TARGET, reason=one))
    return report

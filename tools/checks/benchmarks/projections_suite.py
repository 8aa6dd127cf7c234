"""`props bench projections`: rebuild speed against a raw read, and live lag under load.

A generated log (critic runs on the sample specimens with issues, LLM calls and grades from
two scorers: the realistic mix) is rebuilt into every projection; the same events are read
raw (keyset pages, JSON decoded with orjson) in alternation with the rebuilds. A rebuild folds
most of the log on the server (row maps): its rate is the server's, on both cores. Then the live
runner follows a steady append load and each event's lag is taken from its append's return
to the commit of the batch that projected it.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import anyio
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from props.core.domain import streams
from props.core.domain.store import open_store
from props.core.log.events import NewEvent, RecordedEvent
from props.core.log.store import EventStore
from props.projections import engine
from props.tools.checks.benchmarks.log_suite import raw_read_all
from props.tools.checks.benchmarks.report import Check, Report
from props.tools.checks.workload import Workload
from props.tools.command_line.render import Console


async def run(dsn: str, quick: bool, console: Console) -> Report:
    runs = 10_000 if quick else 52_500  # 190,000 events; a little over 1,000,000
    load_seconds = 5.0 if quick else 20.0
    report = Report("projections", quick)
    async with open_store(dsn, max_connections=6) as store:
        work = Workload(seed=42)
        events = await work.setup(store)
        with Progress(TextColumn("generating the log"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("runs"), console=console, transient=True) as bar:
            task = bar.add_task("generate", total=runs)
            events += await work.append_runs(store, runs,
                                             progress=lambda _n: bar.advance(task, 1))
        report.figures["events"] = events
        await store.analyze_stale_partitions()  # both sides read with fresh statistics
        console.print(f"log of {events:,} events; rebuild vs raw read ...")
        spent = {"raw": 0.0, "rebuild": 0.0}
        counted = {"raw": 0, "rebuild": 0}
        for _ in range(2):  # alternated: the machine's speed drifts
            n, seconds = await raw_read_all(store.pool)
            counted["raw"] += n
            spent["raw"] += seconds
            result = await engine.rebuild(store)
            counted["rebuild"] += events
            spent["rebuild"] += result.seconds
        raw_rate, rebuild_rate = (counted[k] / spent[k] for k in ("raw", "rebuild"))
        report.figures["rebuild_events_per_s"] = round(rebuild_rate)
        report.figures["raw_read_events_per_s"] = round(raw_rate)
        report.checks.append(Check("rebuild_vs_raw_read", rebuild_rate / raw_rate, ">=", 0.5))
        report.checks.append(Check("rebuild_events_per_s", rebuild_rate, ">=", 50_000,
                                   unit="events/s"))
        console.print(f"live lag under {1000:,} events/s for {load_seconds:.0f}s ...")
        lag = await _lag_under_load(store, work, rate=1000, seconds=load_seconds)
        report.figures["lag"] = lag
        # An event the runner never projected fails the check, however few: its lag is
        # unknown (the worst seen stands for it), and the p99 alone would pass up to 1%.
        value = (lag["max_ms"] if lag["not_projected_in_time"] else lag["p99_ms"]) \
            if lag["events"] else None
        report.checks.append(Check("lag_p99_ms", value, "<=", 250, unit="ms"))
    return report


CATCH_UP_WAIT = 60.0  # seconds the runner has, once the load stops, to project the rest


async def _lag_under_load(store: EventStore, work: Workload, *, rate: int,
                          seconds: float) -> dict[str, Any]:
    appended: dict[uuid.UUID, float] = {}
    lags: list[float] = []

    def committed(batch: Any) -> None:
        now = time.perf_counter()
        for rec in batch:
            assert isinstance(rec, RecordedEvent)
            at = appended.pop(rec.event_id, None)
            if at is not None:
                lags.append(now - at)

    runner = engine.Runner(store, on_commit=committed)
    sent = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run, name="bench-projection-runner")
        await anyio.sleep(0.5)  # the runner is up and caught up
        t0 = time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            if sent > rate * elapsed:
                await anyio.sleep(0.002)
                continue
            run, run_events, grades = work.run_events()
            for stream, batch in ((streams.run(run), run_events),
                                  (f"grading-{run}-overlap@2", grades)):
                if not batch:
                    continue
                ids = [uuid.uuid4() for _ in batch]
                await store.append(stream, [NewEvent(e, i) for e, i in zip(batch, ids,
                                                                             strict=True)])
                now = time.perf_counter()
                appended.update((i, now) for i in ids)
                sent += len(batch)
        with anyio.move_on_after(CATCH_UP_WAIT):
            while appended:  # noqa: ASYNC110 - waits for the runner to project the rest
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    # What the runner had not projected by then counts with the lag it had reached (a lower
    # bound): a runner that falls behind fails the check with a figure, never a traceback.
    now = time.perf_counter()
    lags.extend(now - at for at in appended.values())
    lags.sort()
    ms = [x * 1000 for x in lags]
    return {"events": len(ms), "rate_per_s": round(sent / seconds),
            "not_projected_in_time": len(appended),
            "p50_ms": round(statistics.median(ms), 2) if ms else None,
            "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 2) if ms else None,
            "max_ms": round(ms[-1], 2) if ms else None}

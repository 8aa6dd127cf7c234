"""What `props projections` does: the handlers that the parsers of
`props.tools.command_line.commands.projections` name."""

from __future__ import annotations

import argparse
from functools import partial

import anyio
import anyio.abc

from props.core.domain import parking as core_parking
from props.core.log import stopping
from props.core.log.store import EventStore
from props.projections import engine, parking, readers
from props.projections import status as projection_status
from props.projections.base import Projection
from props.reactors.service import cancel_on_signal
from props.tools.command_line import progress, render
from props.tools.command_line.render import Console

console = Console(highlight=False, stderr=True)


async def run_cmd(args: argparse.Namespace, store: EventStore) -> int:
    runner = engine.Runner(store)
    async with anyio.create_task_group() as tg:
        await tg.start(partial(cancel_on_signal, stop=stopping.current()), tg.cancel_scope,
                       "stopping: finishing the current batch")
        console.print(f"projection runner on {len(engine.ALL)} projections; Ctrl-C stops")
        await runner.run()
    console.print(f"stopped after {runner.stats.events:,} events "
                  f"in {runner.stats.batches:,} batches")
    return 0


async def status_cmd(args: argparse.Namespace, store: EventStore) -> int:
    states = await projection_status.of(store)
    fence = await store.fence_status()
    rows = [{"projection": s.name, "version": s.version,
             "checkpoint": None if s.checkpoint is None else str(s.checkpoint),
             "lag_events": s.lag_events, "lag_seconds": s.lag_seconds, "parked": s.parked}
            for s in states]
    render.emit(args, rows, [("projection", "projection"), ("version", "version"),
                                    ("checkpoint", "checkpoint"),
                                    ("lag_events", "lag (events)"),
                                    ("lag_seconds", "lag (seconds)"), ("parked", "parked")],
                empty="no projections", cells={
                    "checkpoint": lambda c: c or "never built",
                    "lag_seconds": lambda v: "-" if v is None else f"{v:.1f}"})
    if args.format == "table":
        Console().print(fence.describe())
    return 0


def _chosen(args: argparse.Namespace, command: str) -> tuple[Projection, ...]:
    if args.all == bool(args.names):
        raise SystemExit(f"props projections {command}: name projections, or give --all")
    return engine.ALL if args.all else engine.by_name(args.names)


async def retry_parked_cmd(args: argparse.Namespace, store: EventStore) -> int:
    chosen = _chosen(args, "retry-parked")
    retried = {p.name: await core_parking.retry_all(store, parking.consumer(p), "cli")
               for p in chosen}
    again = [p for p in chosen if retried[p.name]]
    console = Console(highlight=False)
    if again:
        report = await engine.rebuild(store, again, reader_grace=args.reader_grace)
        _say_readers_ended(console, report, args.reader_grace)
    for p in chosen:
        left = len(await core_parking.parked(store, parking.consumer(p)))
        console.print(f"{p.name}: {retried[p.name]} parked event(s) taken up again, "
                      f"{left} parked still")
    return 0


async def rebuild_cmd(args: argparse.Namespace, store: EventStore) -> int:
    chosen = _chosen(args, "rebuild")
    total = await store.reader.count()
    with progress.counting_events("rebuilding", total) as advance:
        report = await engine.rebuild(store, chosen, progress=advance,
                                      reader_grace=args.reader_grace)
    _say_readers_ended(Console(highlight=False), report, args.reader_grace)
    Console(highlight=False).print(
        f"rebuilt {', '.join(report.projections)} from {report.events:,} events in "
        f"{report.seconds:.1f}s ({report.events_per_second:,.0f} events/s)"
        + (", resuming an interrupted rebuild" if report.resumed else "")
    )
    return 0


def _say_readers_ended(out: Console, report: engine.RebuildReport, grace: float) -> None:
    if report.readers_ended:
        out.print(readers.describe(report.readers_ended, grace), soft_wrap=True)


async def sql_cmd(args: argparse.Namespace) -> int:
    from props.core.domain.catalog import REGISTRY
    from props.projections import folding

    [chosen] = [p for p in engine.ALL if p.name == args.name]
    print(folding.statements(chosen, REGISTRY), end="")
    return 0

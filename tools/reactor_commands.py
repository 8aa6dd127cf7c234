"""`props serve` and `props reactors status`: the reactors as a service, and where they stand."""

from __future__ import annotations

import argparse
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from props.core import database, errors
from props.core.store import START, EventStore
from props.reactors import runtime
from props.reactors.service import SERVICES, Service, container_runtimes, stop_on_signal
from props.schema import queries

console = Console(highlight=False, stderr=True)
_AGENTS = queries.load("agents")
_LAG = queries.load("projections")["lag"]
REACTORS = ("launcher", "grader", "supervisor")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="run the reactors and the projection runner (a service)",
        description="Run the critic launcher (run requested -> container -> run finished), "
        "the grader (run finished -> grades under the active scorer) and the projection "
        "runner until SIGTERM or Ctrl-C. A stop finishes the event in hand; running "
        "containers are left to run and adopted by the next start. Several `props serve` "
        "processes may share a database: each service is active in one of them at a time.")
    p.add_argument("--only", action="append", choices=SERVICES, metavar="NAME",
                   help=f"run only this service (repeatable): {', '.join(SERVICES)}")
    p.add_argument("--runtime", choices=("auto", "docker", "local"), default="auto",
                   help="local definitions always run as local processes; image definitions "
                   "need Docker: auto uses the engine this machine has (DOCKER_HOST or "
                   "/var/run/docker.sock; waited for while it restarts), docker requires it "
                   "to answer at start, local never uses it")
    p.add_argument("--max-concurrent", type=int, default=8, metavar="N",
                   help="most containers at once (also bounded by what the host can hold); "
                   "further runs wait queued (default 8)")
    p.set_defaults(handler=serve_cmd)

    r = sub.add_parser("reactors", help="where the reactors stand",
                       description="The reactors follow the log and act on it.")
    cmds = r.add_subparsers(dest="reactors_command", metavar="ACTION", required=True)
    s = cmds.add_parser("status", help="checkpoint, lag and parked events of each reactor",
                        description="Each reactor's checkpoint, its lag behind the log, the "
                        "events it parked (gave up on), and the critic runs queued, running "
                        "and finished.")
    s.set_defaults(handler=status_cmd)


async def serve_cmd(args: argparse.Namespace) -> int:
    """Serve until stopped; a database that is down (at start or later) is waited for."""
    stop = anyio.Event()

    async def serve() -> None:
        async with EventStore.open(max_connections=8) as store, \
                container_runtimes(args.runtime) as runtimes:
            service = Service(store, runtimes, only=args.only or SERVICES,
                              max_concurrent=args.max_concurrent)
            kinds = " and ".join(rt.kind for rt in runtimes)
            console.print(f"serving {', '.join(args.only or SERVICES)}; runtimes: {kinds}; "
                          f"Ctrl-C stops")
            await service.run(stop)

    async with anyio.create_task_group() as tg:
        await tg.start(stop_on_signal, stop, "stopping: finishing the events in hand")
        # An embedded server that cannot start will not start by waiting.
        await database.serve_until_stopped(serve, stop, "props serve",
                                           fatal=(errors.EmbeddedServerError,))
        tg.cancel_scope.cancel()
    return 0


async def status_cmd(args: argparse.Namespace) -> int:
    table = Table("reactor", "checkpoint", "lag (events)", "lag (seconds)", "parked")
    async with EventStore.open(max_connections=2) as store:
        for name in REACTORS:
            cp = await store.find_checkpoint(runtime.checkpoint_name(name))
            at = cp or START
            lag = await store.pool.fetchrow(_LAG, at.tx_id, at.position)
            parked = await store.pool.fetchval(_AGENTS["parked"], f"reactor-{name}")
            assert lag is not None
            lag_s = "-" if lag["seconds"] is None else f"{lag['seconds']:.1f}"
            table.add_row(name, str(cp or "never ran"), f"{lag['events']:,}", lag_s,
                          f"{parked:,}")
        runs = await store.pool.fetchrow(_AGENTS["run_counts"])
    out = Console(highlight=False)
    out.print(table)
    assert runs is not None
    out.print(f"critic runs: {runs['queued']:,} queued, {runs['running']:,} running, "
              f"{runs['finished']:,} finished")
    return 0

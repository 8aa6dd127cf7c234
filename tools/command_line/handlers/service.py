"""What `props service` does: the handlers that the parsers of
`props.tools.command_line.commands.service` name."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from props.core.domain import quotas, run_requests, tokens
from props.core.domain.specimens import specimen_sync
from props.core.domain.store import open_store
from props.core.domain.vocabulary import SERVICES
from props.core.log import database, errors, migrate, retries, stopping
from props.core.log.store import EventStore
from props.reactors import host
from props.reactors.launcher import launchers
from props.reactors.launcher.run_specs import AgentDatabase
from props.reactors.service import Service, cancel_on_signal, container_runtimes
from props.tools.command_line import arguments, logs, render, run_log, service_config
from props.tools.command_line.handlers import specimens as specimen_handlers
from props.tools.command_line.render import Column, Console

log = logging.getLogger("props.serve")


async def serve_cmd(args: argparse.Namespace) -> int:
    """Serve until stopped; a database that is down (at start or later) is waited for."""
    config = service_config.load(args)
    logs.configure(config.log_format, args.verbose)
    only: list[str] = list(config.only or SERVICES)
    began, connected = time.monotonic(), False
    stop = stopping.Stop(config.stop_seconds)

    async def serve() -> None:
        nonlocal connected
        if config.auto_migrate:  # as the owner; the service itself owns nothing
            applied = await migrate.migrate_database(config.dsn or database.resolve_dsn())
            log.info(f"migrations applied at start: {len(applied)}")
        dsn = config.dsn or database.resolve_service_dsn()
        async with open_store(dsn, max_connections=16) as store, \
                container_runtimes(config.runtime, config.engine,
                                   trust_local_commands=config.trust_local_commands
                                   ) as runtimes:
            connected = True
            if config.auto_sync_specimens is not None:
                await _sync_specimens(store, config.auto_sync_specimens)
            service = Service(store, runtimes, only=only, max_concurrent=config.max_concurrent,
                              launcher_name=config.launcher_name, engine_url=config.engine,
                              lease_seconds=config.lease_seconds,
                              engine_wait=config.engine_wait,
                              agent_database=_agent_database(config),
                              stop=stop, quotas=_shares(config))
            kinds = " and ".join(rt.kind for rt in runtimes)
            async with anyio.create_task_group() as tg:
                await _start_http(tg, store, config)
                tg.start_soon(_tell_runs, store, args.quiet, name="props-run-log")
                tg.start_soon(_say_standing, service, kinds, name="props-standing")
                await service.run()

    # The service's stop is every shield's in this process (the log's own included), and
    # the projection runner's as much as the reactors'.
    with stop.as_current():
        async with anyio.create_task_group() as tg:
            await tg.start(partial(cancel_on_signal, stop=stop), tg.cancel_scope,
                           "stopping: finishing the events in hand")
            # An embedded server that cannot start, or settings that are wrong, will not
            # start by waiting.
            await retries.keep_serving(
                serve, "props serve",
                fatal=(errors.EmbeddedServerError, errors.ConfigurationError,
                       errors.SchemaError),
                give_up=lambda: not connected
                and time.monotonic() - began >= config.connect_wait)
            tg.cancel_scope.cancel()
    if stop.deadline is not None:  # (a signal stopped it)
        log.log(logging.WARNING if stop.unfinished else logging.INFO, stop.report())
    return 0


async def _say_standing(service: Service, kinds: str) -> None:
    """Say what this process serves once each part knows whether it leads: a second `props
    serve` on the same database stands by (and says so) for what another one serves."""
    serving, standby = await service.standing()
    if not standby:
        log.info(f"serving {', '.join(serving)}; runtimes: {kinds}; Ctrl-C stops")
        return
    log.info(("serving " + ", ".join(serving) + "; " if serving else "")
             + f"standing by for {', '.join(standby)}: another props serve is active on this "
             f"database, and this one takes over when it stops; Ctrl-C stops")


async def _tell_runs(store: EventStore, quiet: bool) -> None:
    """The runs' changes in the service's log; what it cannot tell stops it alone."""
    try:
        await run_log.narrate(store, quiet)
    except Exception:  # the runs go on, and the operator reads why the lines stopped
        log.exception("the run log stopped (the service goes on)")


def _agent_database(config: service_config.ServiceConfig) -> AgentDatabase | None:
    if config.agent_database is None:
        return None
    host, port = arguments.parse_address(config.agent_database, "agent_database")
    return AgentDatabase(host, port, config.agent_sslmode, config.agent_network)


async def _sync_specimens(store: EventStore, directory: Path) -> None:
    found = specimen_handlers.load_valid(directory)
    # (as `specimens sync`: a key with a TODO left is a draft, never recorded at start)
    specimen_handlers.refuse_todos(directory)
    report = await specimen_sync.sync(store, str(await anyio.Path(directory).resolve()), found,
                                      retire_missing=False)
    log.info(f"specimens synced at start from {directory}: {len(report.added)} added, "
                  f"{len(report.updated)} new versions, {len(report.unchanged)} unchanged")


async def _start_http(tg: anyio.abc.TaskGroup, store: EventStore,
                      config: service_config.ServiceConfig) -> None:
    """The API and the registry proxy, when configured; the first start's admin token."""
    if not (config.http or config.registry):
        return
    # Imported here: the web stack is only loaded by the commands that serve HTTP.
    from props.tools.http import app as http_app
    from props.tools.http import registry
    from props.tools.http import server as http_server

    secret = await tokens.create_first_admin(store)
    if secret is not None:
        # Printed, never logged: the one time this token exists outside its holder.
        line = f"admin token (shown once, store it now): {secret}"
        if config.log_format == "json":
            line = orjson.dumps({"level": "warning", "logger": "props.serve",
                                 "message": "admin token (shown once, store it now)",
                                 "admin_token": secret}).decode()
        print(line, file=sys.stderr, flush=True)
    if config.http:
        sock = http_server.bind(config.http, "HTTP API")
        await tg.start(http_server.serve, http_app.create_app(store, _shares(config)), sock)
        log.info(f"HTTP API on http://{_address(sock)}")
    if config.registry:
        assert config.registry_upstream is not None
        proxy = registry.RegistryProxy(store, config.registry_upstream,
                                       config.registry_pull_from,
                                       config.registry_upload_quota_mb * 1024**2,
                                       config.registry_unreferenced_mb * 1024**2)
        sock = http_server.bind(config.registry, "registry proxy")

        async def serve_registry(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                await http_server.serve(proxy.app(), sock, task_status=task_status)
            finally:
                with stopping.shield("the registry proxy: its close"):
                    await proxy.aclose()

        await tg.start(serve_registry)
        log.info(f"registry proxy on {_address(sock)} -> {config.registry_upstream}")


def _shares(config: service_config.ServiceConfig) -> quotas.Quotas:
    """Each token's quotas: the API refuses past them, the evaluation driver holds to them."""
    return quotas.Quotas(config.quota_runs_in_flight, config.quota_cases_queued,
                         config.quota_evaluations_open)


def _address(sock: Any) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def status_cmd(args: argparse.Namespace, store: EventStore) -> int:
    known = {launchers.reactor_name(s.name): s for s in await launchers.status(store)}
    rows = []
    for r in await host.status(store, also=sorted(known)):
        launcher = known.get(r.name)
        rows.append({
            "reactor": r.name, "checkpoint": None if r.checkpoint is None
            else str(r.checkpoint), "lag_events": r.lag_events,
            "lag_seconds": r.lag_seconds, "parked": r.parked,
            "serving": launcher.alive if launcher else await host.serving(store, r.name),
            "capacity": launcher.capacity if launcher else None,
            "load": launcher.load if launcher else None,
            "lease_seconds": launcher.lease_seconds if launcher else None,
            "engine": launcher.engine if launcher else None})
    runs = await run_requests.counts(store)
    columns = [
        Column("reactor", "reactor"),
        Column("serving", "serving now", lambda v: "yes" if v else "no", short="up"),
        Column("checkpoint", "checkpoint", lambda c: c or "never ran", optional=True),
        Column("lag_events", "lag (events)", short="lag", justify="right"),
        Column("lag_seconds", "lag (seconds)", lambda v: "-" if v is None else f"{v:.1f}",
               short="lag s", justify="right", optional=True),
        Column("parked", "parked", justify="right")]
    if args.format != "table" or known:  # a table shows launchers' columns once there are
        columns += [Column("capacity", "capacity", short="cap", optional=True),
                    Column("load", "runs held", short="held", optional=True),
                    Column("lease_seconds", "lease (s)", short="lease", optional=True),
                    Column("engine", "engine", optional=True)]
    render.emit(args, rows, columns, empty="no reactors")
    if args.format == "table":
        Console().print(f"critic runs: {runs.queued:,} queued, {runs.running:,} running, "
                        f"{runs.finished:,} finished")
    return 0

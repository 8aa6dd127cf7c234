"""What `props db` does: the handlers that the parsers of
`props.tools.command_line.commands.db` name."""

from __future__ import annotations

import argparse
import os

import orjson
from rich.text import Text

from props.core.domain import parking
from props.core.domain.store import open_store
from props.core.log import database, embedded, migrate, server_checks
from props.schema import catalog_dump
from props.tools.command_line.render import Column, Console, print_table

console = Console()


async def migrate_cmd(args: argparse.Namespace) -> int:
    done = await migrate.migrate_database(database.resolve_dsn())
    if done:
        for m in done:
            console.print(f"applied {m.name}")
    else:
        console.print("schema is up to date")
    return 0


async def harden_cmd(args: argparse.Namespace) -> int:
    dsn = args.dsn or database.resolve_dsn()
    async with database.session(dsn) as conn:
        left = await migrate.harden(conn)
        found = await server_checks.warnings(conn)
    console.print(f"hardened {database.redact(dsn)}: agents and analysts may no longer call "
                  f"large-object, advisory-lock, NOTIFY or transaction-id functions, nor "
                  f"make temp tables; the analyst is read-only with timeouts")
    for line in [*left, *found]:
        console.print(f"still: {line}")
    return 1 if left else 0


async def status_cmd(args: argparse.Namespace) -> int:
    dsn = database.resolve_dsn()
    async with database.session(dsn) as conn:
        states = await migrate.status(conn)
        found = await server_checks.warnings(conn)
    current = all(s.state == "applied" for s in states)
    count, fence, parked = None, None, None
    if current:
        async with open_store(dsn, max_connections=2) as store:
            count = await store.reader.count()
            fence = await store.fence_status()
            parked = await parking.count_all(store)
        async with database.session(database.resolve_service_dsn()) as conn:
            found += await server_checks.service_warnings(conn)
    if args.format == "json":
        print(orjson.dumps({
            "database": database.redact(dsn),
            "migrations": [{"name": s.name, "state": s.state, "applied_at": s.applied_at}
                           for s in states],
            "numbering_gaps": migrate.gaps(states),
            "events": count, "parked": parked,
            "held_back": fence.held_back if fence else None,
            "last_readable": str(fence.last_visible) if fence and fence.last_visible else None,
            "warnings": found}).decode())
        return 0 if current else 1
    console.print(f"database: {database.redact(dsn)}")
    print_table(console, [Column("name", "migration"), Column("state", "state"),
                          Column("applied_at", "applied at", optional=True)],
                [{"name": s.name, "state": s.state, "applied_at": s.applied_at}
                 for s in states], wide=args.wide)
    if skipped := migrate.gaps(states):
        console.print(Text(f"numbering skips {', '.join(f'{v:04d}' for v in skipped)} (no such "
                           f"migration; fine: a later file may not take a skipped number)"))
    if late := [s.name for s in states if s.state == "late"]:
        console.print(Text(f"late: {', '.join(late)} numbered below an applied migration; "
                           f"`props db migrate` refuses it until it is renumbered"))
    if not current:
        console.print("run `props db migrate` to bring the schema up to date")
        return 1
    assert count is not None and fence is not None
    console.print(f"events: {count:,}; last readable: {fence.last_visible or '-'}; parked "
                  f"(skipped by a consumer): {parked or 0}" + (
                      " (props projections status, props reactors status)" if parked else ""))
    console.print(fence.describe())
    for line in found:
        console.print(Text(f"warning: {line}", style="yellow"))
    return 0


async def dsn_cmd(args: argparse.Namespace) -> int:
    if args.analyst:
        print(database.resolve_analyst_dsn())
    elif args.service:
        print(database.resolve_service_dsn())
    else:
        print(database.resolve_dsn())
    return 0


async def stop_cmd(args: argparse.Namespace) -> int:
    if os.environ.get("PROPS_DSN"):
        console.print("PROPS_DSN is set: props does not manage that server")
        return 0
    home = embedded.default_home()
    stopped = embedded.stop(home)
    console.print("embedded server stopped" if stopped else "embedded server was not running")
    return 0


async def schema_cmd(args: argparse.Namespace) -> int:
    if args.from_migrations:  # schema/schema.sql: what every migration gives an empty database
        from props.tools.checks import scratch

        async with scratch.scratch_database(database.resolve_dsn(), "schema") as fresh, \
                database.session(fresh) as conn:
            print(await catalog_dump.describe(conn), end="")
        return 0
    async with database.session(database.resolve_dsn()) as conn:
        print(await catalog_dump.describe(conn), end="")
    return 0

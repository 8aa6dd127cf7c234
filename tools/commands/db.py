"""`props db ...`: migrate, status, dsn, stop, schema."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.text import Text

from props.core.domain.store import open_store
from props.core.log import database, embedded, migrate, server_checks
from props.schema import catalog_dump
from props.tools.render import Console, Table

console = Console()


def add_parser(sub: Any) -> None:
    db = sub.add_parser(
        "db", help="the database: migrate, status, dsn, stop, schema",
        description="Manage the PostgreSQL database props uses (PROPS_DSN, or the embedded one).",
    )
    cmds = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    for name, summary, description, handler in [
        ("migrate", "apply pending schema migrations",
         "Apply every pending migration in schema/migrations, in order, under an advisory "
         "lock. Refuses a migration changed after it was applied.", migrate_cmd),
        ("status", "migrations, event count and the visibility fence",
         "Show which migrations are applied, how many events the log holds, and whether a "
         "long transaction holds the fence back.", status_cmd),
        ("dsn", "print the connection string in use",
         'Print the DSN props uses, so that psql "$(props db dsn)" works, on the embedded '
         "server too (it is started if needed).", dsn_cmd),
        ("stop", "stop the embedded server",
         "Stop the embedded PostgreSQL cleanly (no effect with PROPS_DSN set).", stop_cmd),
        ("schema", "print the schema as the database has it",
         "Print a normalised description of the props schema as this database has it (the "
         "format of schema/declared_schema.txt).", schema_cmd),
    ]:
        sub_parser = cmds.add_parser(name, help=summary, description=description)
        sub_parser.set_defaults(handler=handler)
        if name == "dsn":
            role = sub_parser.add_mutually_exclusive_group()
            role.add_argument(
                "--analyst", action="store_true",
                help="the connection string of the read-only analyst role (projections only)")
            role.add_argument(
                "--service", action="store_true",
                help="the connection string of the service role (appends and reads; owns "
                     "nothing). Without either flag: the owner's")


async def migrate_cmd(args: argparse.Namespace) -> int:
    done = await migrate.migrate_database(database.resolve_dsn())
    if done:
        for m in done:
            console.print(f"applied {m.name}")
    else:
        console.print("schema is up to date")
    return 0


async def status_cmd(args: argparse.Namespace) -> int:
    dsn = database.resolve_dsn()
    async with database.session(dsn) as conn:
        states = await migrate.status(conn)
        found = await server_checks.warnings(conn)
    console.print(f"database: {database.redact(dsn)}")
    table = Table("migration", "state", "applied at")
    for s in states:
        table.add_row(s.name, s.state, str(s.applied_at or ""))
    console.print(table)
    if any(s.state != "applied" for s in states):
        console.print("run `props db migrate` to bring the schema up to date")
        return 1
    async with open_store(dsn, max_connections=2) as store:
        count = await store.pool.fetchval("SELECT count(*) FROM props.events")
        fence = await store.fence_status()
    console.print(f"events: {count:,}; last readable: {fence.last_visible or '-'}")
    console.print(fence.describe())
    async with database.session(database.resolve_service_dsn()) as conn:
        found += await server_checks.service_warnings(conn)
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
    async with database.session(database.resolve_dsn()) as conn:
        print(await catalog_dump.describe(conn), end="")
    return 0

"""`props db ...`: migrate, status, dsn, stop, schema."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.console import Console
from rich.table import Table

from props.core import database, embedded
from props.core.store import EventStore
from props.schema import catalog_dump, migrate

console = Console()


def add_parser(sub: Any) -> None:
    db = sub.add_parser(
        "db", help="the database: migrate, status, dsn, stop, schema",
        description="Manage the PostgreSQL database props uses (PROPS_DSN, or the embedded one).",
    )
    cmds = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    p = cmds.add_parser("migrate", help="apply pending schema migrations",
                        description="Apply every pending migration in schema/migrations, in "
                        "order, under an advisory lock. Refuses a migration changed after it "
                        "was applied.")
    p.set_defaults(handler=migrate_cmd)
    p = cmds.add_parser("status", help="migrations, event count and the visibility fence",
                        description="Show which migrations are applied, how many events the "
                        "log holds, and whether a long transaction holds the fence back.")
    p.set_defaults(handler=status_cmd)
    p = cmds.add_parser("dsn", help="print the connection string in use",
                        description='Print the DSN props uses, so that psql "$(props db dsn)" '
                        "works, on the embedded server too (it is started if needed).")
    p.set_defaults(handler=dsn_cmd)
    p = cmds.add_parser("stop", help="stop the embedded server",
                        description="Stop the embedded PostgreSQL cleanly (no effect with "
                        "PROPS_DSN set).")
    p.set_defaults(handler=stop_cmd)
    p = cmds.add_parser("schema", help="print the schema as the database has it",
                        description="Print a normalised description of the props schema as "
                        "this database has it (the format of schema/declared_schema.txt).")
    p.set_defaults(handler=schema_cmd)


async def migrate_cmd(args: argparse.Namespace) -> int:
    dsn = database.resolve_dsn()
    conn = await database.connect(dsn)
    try:
        done = await migrate.migrate(conn)
    finally:
        await conn.close()
    if done:
        for m in done:
            console.print(f"applied {m.name}")
    else:
        console.print("schema is up to date")
    return 0


async def status_cmd(args: argparse.Namespace) -> int:
    dsn = database.resolve_dsn()
    conn = await database.connect(dsn)
    try:
        states = await migrate.status(conn)
    finally:
        await conn.close()
    console.print(f"database: {database.redact(dsn)}")
    table = Table("migration", "state", "applied at")
    for s in states:
        table.add_row(s.name, s.state, str(s.applied_at or ""))
    console.print(table)
    if any(s.state != "applied" for s in states):
        console.print("run `props db migrate` to bring the schema up to date")
        return 1
    async with EventStore.open(dsn, max_connections=2) as store:
        count = await store.pool.fetchval("SELECT count(*) FROM props.events")
        fence = await store.fence_status()
    console.print(f"events: {count:,}; last readable: {fence.last_visible or '-'}")
    console.print(fence.describe())
    return 0


async def dsn_cmd(args: argparse.Namespace) -> int:
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
    conn = await database.connect(database.resolve_dsn())
    try:
        print(await catalog_dump.describe(conn), end="")
    finally:
        await conn.close()
    return 0

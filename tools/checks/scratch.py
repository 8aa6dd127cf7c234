"""Throw-away databases on the server props uses (for benchmarks and checks)."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from props.core.log import database, migrate, stopping

_SAFE = re.compile(r"^props_[a-z]+_[0-9a-f]{12}$")


@asynccontextmanager
async def scratch_database(server_dsn: str, purpose: str) -> AsyncIterator[str]:
    """A new, migrated database for `purpose`; dropped afterwards, whatever happens."""
    name = f"props_{purpose}_{uuid.uuid4().hex[:12]}"
    if not _SAFE.match(name):  # made here, never from input; checked because it is spliced
        raise ValueError(f"unsafe scratch database name {name!r}")
    dsn = database.with_database(server_dsn, name)
    try:  # (the creation inside: a cancel right after it must not leave the database)
        async with database.session(server_dsn) as admin:
            await admin.execute(f'CREATE DATABASE "{name}"')
        await migrate.migrate_database(dsn)
        yield dsn
    finally:
        # A connection of its own: the server may have restarted meanwhile (props chaos);
        # shielded: a command being cancelled (Ctrl-C, SIGTERM) still drops it, within a
        # minute (a server that took the connection and never answers is not waited on).
        with stopping.shield(f"the scratch database {name}: its drop", at_most=60):
            async with database.session(server_dsn) as admin:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

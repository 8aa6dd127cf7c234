"""Advisory locks: every key props takes, and the one way to be the one active instance.

Replicas of a service (the projection runner, each reactor) run side by side; one of them
works while the others wait to take over. `lead()` is that: it queues for the key on a
dedicated connection, then holds it for the block, and ends the block (StoreUnavailable) if
the connection's session is lost, since another instance may hold the key by then. Locks
held for a statement or a transaction (`exclusive()`, `pg_advisory_xact_lock`) take their
keys from here too, so no two purposes ever share a key.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import anyio
import asyncpg

from props.core.log import database
from props.schema import queries

log = logging.getLogger(__name__)
_Q = queries.load("leadership")

# Any 64-bit constants unique to props ("props" and three letters of the purpose).
MIGRATION = 0x70726F70_73_6D6967  # one migrator at a time
PROJECTION_RUNNER = 0x70726F70_7275_6E  # one live projection runner per database
PROJECTION_REBUILD = 0x70726F70_7262_6C  # one rebuild per database
# Taken by every transaction that writes live projection rows (the runner's batches, a
# rebuild's swap) so that the two never interleave on the same tables.
PROJECTION_LIVE_WRITE = 0x70726F70_6C77_72
FIRST_TOKEN = 0x70726F70_746F_6B  # two services starting at once make one admin token


def reactor(name: str) -> int:
    """The key of reactor `name` (one active instance per reactor and database)."""
    digest = hashlib.sha256(f"props reactor {name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class Standing:
    """Whether an instance leads or stands by, as its first try for the key answered:
    `settled` is set then (a service says which of its parts serve and which stand by)."""

    def __init__(self) -> None:
        self.leading = False
        self.settled = anyio.Event()

    def answer(self, leading: bool) -> None:
        self.leading = leading
        self.settled.set()


def evaluation(name: str) -> int:
    """The key its one driver holds while it requests an evaluation's cases (`props eval
    run` for the whole drive, the service's evaluation driver for one look)."""
    digest = hashlib.sha256(f"props evaluation {name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def requester(name: str) -> int:
    """The key one requester (an API token's `api:NAME`) holds for the transaction that
    checks its quotas and appends what it asked for, so that its requests at once, in any
    number of API processes, are counted one after another."""
    digest = hashlib.sha256(f"props requester {name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def definition_tag(agent_type: str, name: str, tag: str) -> int:
    """The key of one definition's tag: its check, its push upstream and its record are one
    decision (two concurrent pushes of a new tag must not both be recorded)."""
    digest = hashlib.sha256(f"props tag {agent_type}:{name}:{tag}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@asynccontextmanager
async def lead(dsn: str, key: int, what: str, retry_every: float = 2.0,
               standing: Standing | None = None) -> AsyncIterator[None]:
    """Wait to be the one active `what`, then hold `key` for the block: `async with
    lead(...): ...`. Waiting ends when the caller is cancelled. The block is cancelled, and
    StoreUnavailable raised, once the session holding the key is lost. `standing` is told
    whether this instance leads or waits."""
    async with database.session(dsn) as conn:
        while not await conn.fetchval(_Q["try_lock"], key):
            if standing is not None:
                standing.answer(False)
            log.info("%s: another instance is active; waiting to take over", what)
            await anyio.sleep(retry_every)
        if standing is not None:
            standing.answer(True)
        async with anyio.create_task_group() as tg:
            # The lock lives with the session.
            tg.start_soon(database.watch_session, conn, name=f"props-lock-watch {what}")
            yield
            tg.cancel_scope.cancel()


@asynccontextmanager
async def exclusive(dsn: str, key: int) -> AsyncIterator[None]:
    """Hold `key` for the block, waiting for it as long as another holder keeps it."""
    async with database.session(dsn) as conn:
        await conn.execute(_Q["lock"], key)
        try:
            yield
        finally:
            await conn.execute(_Q["unlock"], key)


class _Pooled(Protocol):
    pool: asyncpg.Pool


@asynccontextmanager
async def if_free(store: _Pooled, key: int) -> AsyncIterator[bool]:
    """Hold `key` for the block when nobody else does (yields True; False: another holds
    it), in a transaction that writes nothing (no xid: no reader's fence is held) on a
    pooled connection: no new connection for a short hold."""
    async with store.pool.acquire() as conn, conn.transaction():
        yield bool(await conn.fetchval(_Q["try_xact_lock"], key))


async def for_transaction(conn: database.Connection, key: int) -> None:
    """Hold `key` until `conn`'s transaction ends (waiting for it)."""
    await conn.execute(_Q["xact_lock"], key)

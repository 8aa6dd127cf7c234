"""The peers `props bench log --peers` runs beside props: the same events written and read
through another event store on the same database, in the same run.

- `eventsourcing` (PyPI, the `bench` extra): its PostgreSQL application recorder, the layer an
  eventsourcing application writes and reads through (psycopg 3, synchronous: each block runs
  in a worker thread and times itself there, so the thread hop is paid once per block).
- Message DB (Eventide's SQL functions, vendored in `message_db/` with their licence):
  `write_message` per event and `get_category_messages` pages, called from asyncpg as props
  calls its own SQL.

A peer that cannot be installed says why (`Unavailable`); the suite then reports its checks
as NORUN with that reason, never as a pass.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
import asyncpg
import orjson
import psycopg.conninfo

from props.core.log import database

MESSAGE_DB = Path(__file__).with_name("message_db")
# Message DB's install.sh order (its role, privileges and views are not needed here).
MESSAGE_DB_FILES = (
    "schema/message-store.sql", "tables/messages.sql", "types/message.sql",
    "functions/message-store-version.sql", "functions/hash-64.sql",
    "functions/acquire-lock.sql", "functions/category.sql", "functions/is-category.sql",
    "functions/id.sql", "functions/cardinal-id.sql", "functions/stream-version.sql",
    "functions/write-message.sql", "functions/get-stream-messages.sql",
    "functions/get-category-messages.sql", "functions/get-last-stream-message.sql",
    "indexes/messages-id.sql", "indexes/messages-stream.sql", "indexes/messages-category.sql",
)
# One event as every side stores it: (event id, stream, type, data JSON, metadata JSON).
Event = tuple[uuid.UUID, str, str, str, str]


class Unavailable(Exception):
    """A peer that cannot run here; the message says why, for the NORUN line."""


class Peer(Protocol):
    name: str
    version: str

    async def append_each(self, events: Sequence[Event]) -> None:
        """Each event in a transaction of its own."""

    async def append_batch(self, events: Sequence[Event]) -> None:
        """All `events` (one stream) in one transaction."""

    async def read_all(self) -> int:
        """Every event this peer holds, in order, in pages of 1,000, each event's JSON
        decoded; returns how many."""


class EventsourcingPeer:
    """The eventsourcing library's `PostgresApplicationRecorder` (a table of its own, in the
    schema `bench_eventsourcing`). It has no metadata column: the data and the metadata go
    into its `state` bytes as one JSON document, and a read decodes that."""

    name = "eventsourcing"

    def __init__(self, recorder: Any, stored_event: Any, version: str) -> None:
        self.recorder = recorder
        self.stored_event = stored_event
        self.version = version
        self.versions: dict[str, int] = {}

    def _stored(self, events: Sequence[Event]) -> list[Any]:
        out = []
        for _id, stream, kind, data, meta in events:
            v = self.versions[stream] = self.versions.get(stream, 0) + 1
            state = b'{"data":' + data.encode() + b',"metadata":' + meta.encode() + b"}"
            out.append(self.stored_event(originator_id=_originator(stream),
                                         originator_version=v, topic=kind, state=state))
        return out

    async def append_each(self, events: Sequence[Event]) -> None:
        stored = self._stored(events)

        def each() -> None:
            for e in stored:
                self.recorder.insert_events([e])

        await anyio.to_thread.run_sync(each)

    async def append_batch(self, events: Sequence[Event]) -> None:
        stored = self._stored(events)
        await anyio.to_thread.run_sync(self.recorder.insert_events, stored)

    async def read_all(self) -> int:
        def read() -> int:
            n, last, loads = 0, 0, orjson.loads
            while True:
                page = self.recorder.select_notifications(last, 1000,
                                                          inclusive_of_start=False)
                if not page:
                    return n
                for note in page:
                    loads(note.state)
                n += len(page)
                last = page[-1].id

        return await anyio.to_thread.run_sync(read)


def _originator(stream: str) -> uuid.UUID:
    # The recorder keys aggregates by UUID: the stream's own (run-<uuid>), else one derived.
    try:
        return uuid.UUID(stream.split("-", 1)[1])
    except (IndexError, ValueError):
        return uuid.uuid5(uuid.NAMESPACE_URL, stream)


@contextlib.asynccontextmanager
async def eventsourcing_peer(dsn: str) -> AsyncIterator[EventsourcingPeer]:
    try:
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
    except ImportError as e:
        raise Unavailable(f"eventsourcing is not installed ({e.name} missing): "
                          "pip install 'props[bench]'") from None
    async with database.session(dsn) as conn:
        await conn.execute("CREATE SCHEMA IF NOT EXISTS bench_eventsourcing")
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    try:
        datastore = PostgresDatastore(
            dbname=str(info.get("dbname", "")), host=str(info.get("host", "")),
            port=str(info.get("port", "5432")), user=str(info.get("user", "")),
            password=str(info.get("password", "")), schema="bench_eventsourcing")
    except Exception as e:  # a driver or pool that refuses this server
        raise Unavailable(f"eventsourcing could not connect: {_first_line(e)}") from None
    try:
        recorder = PostgresApplicationRecorder(datastore)
        await anyio.to_thread.run_sync(recorder.create_table)
        yield EventsourcingPeer(recorder, StoredEvent, metadata.version("eventsourcing"))
    finally:
        await anyio.to_thread.run_sync(datastore.close)


class MessageDbPeer:
    """Message DB's `write_message` (it takes an advisory lock on the stream's category and
    reads the stream's version, then inserts) and `get_category_messages`, on a connection of
    its own with Message DB's search path."""

    name = "message_db"
    WRITE = "SELECT message_store.write_message($1, $2, $3, $4::jsonb, $5::jsonb)"
    READ = ("SELECT global_position, data, metadata "
            "FROM message_store.get_category_messages($1, $2, 1000)")

    def __init__(self, conn: asyncpg.Connection, version: str) -> None:
        self.conn = conn
        self.version = version
        self.categories: set[str] = set()

    def _args(self, events: Sequence[Event]) -> list[tuple[str, str, str, str, str]]:
        self.categories.update(e[1].split("-", 1)[0] for e in events)
        return [(str(i), stream, kind, data, meta) for i, stream, kind, data, meta in events]

    async def append_each(self, events: Sequence[Event]) -> None:
        for args in self._args(events):
            await self.conn.fetchval(self.WRITE, *args)

    async def append_batch(self, events: Sequence[Event]) -> None:
        args = self._args(events)
        async with self.conn.transaction():
            await self.conn.executemany(self.WRITE, args)

    async def read_all(self) -> int:
        n, loads = 0, orjson.loads
        for category in sorted(self.categories):
            position = 1
            while True:
                page = await self.conn.fetch(self.READ, category, position)
                if not page:
                    break
                for r in page:
                    loads(r[1])
                    loads(r[2])
                n += len(page)
                position = page[-1][0] + 1
        return n


@contextlib.asynccontextmanager
async def message_db_peer(dsn: str) -> AsyncIterator[MessageDbPeer]:
    missing = [f for f in MESSAGE_DB_FILES if not (MESSAGE_DB / f).is_file()]
    if missing:
        raise Unavailable(f"Message DB's SQL is missing here ({missing[0]} under {MESSAGE_DB})")
    conn = await database.connect(dsn)
    try:
        await conn.execute("SET search_path = message_store, public")
        try:
            for f in MESSAGE_DB_FILES:
                await conn.execute((MESSAGE_DB / f).read_text())
        except asyncpg.PostgresError as e:
            raise Unavailable(f"Message DB's SQL did not install: {_first_line(e)}") from None
        version = await conn.fetchval("SELECT message_store.message_store_version()")
        yield MessageDbPeer(conn, str(version))
    finally:
        await conn.close()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]

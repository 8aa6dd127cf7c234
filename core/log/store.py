"""The event store: appends to streams, and the log's parts behind one object.

The store appends (one stream, many streams in one COPY, several in one transaction); it reads
through its `reader`, moves checkpoints through `checkpoints`, says where the fence stands
(`fence`), and runs the layers' SQL (`sql`); its methods of those are the parts' own.

An append is one statement (an INSERT that computes the stream's next versions, or a COPY
when the writer states the expected version of a large batch): atomic, checked against the
expected version, and idempotent by event id. A trigger keeps every stream dense and in
transaction order whoever writes. Reads of the global log go through the visibility fence
(see `read_all`), so a consumer that checkpoints `(tx_id, global_position)` never skips an
event committed out of order.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg

from props.core.log import blobs, database, errors, fence, migrate, partitions, retries
from props.core.log.batches import COPY_COLUMNS, Batch, prepare
from props.core.log.checkpoints import START, Checkpoint, Checkpoints
from props.core.log.events import (
    DecodeFilter,
    Event,
    EventRegistry,
    NewEvent,
    RecordedEvent,
)
from props.core.log.reader import Reader
from props.core.log.retries import RetryRace
from props.core.log.sql import Sql
from props.schema import queries

if TYPE_CHECKING:
    from props.core.log.subscription import Subscription

log = logging.getLogger(__name__)
_Q = queries.load("events")

# From this many events with a known expected version, COPY beats one INSERT statement
# despite its extra round trip (measured by `props bench log`).
COPY_THRESHOLD = 20


@dataclasses.dataclass(frozen=True)
class AppendResult:
    stream_id: str
    first_version: int
    last_version: int
    already_stored: bool  # a retried append: nothing new was written


class StoreTransaction:
    """Appends inside one database transaction (see `EventStore.transaction`)."""

    def __init__(self, store: EventStore, conn: database.Connection) -> None:
        self.store = store
        self.conn = conn

    async def append(
        self,
        stream_id: str,
        events: Sequence[Event | NewEvent],
        *,
        expected_version: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AppendResult:
        """As `EventStore.append`, but committed with the transaction. A race with another
        writer is a `ConcurrencyConflict` here (the transaction cannot be retried from
        inside): retry the whole transaction."""
        batch = prepare(self.store.registry, stream_id, events, expected_version, metadata)
        try:
            return await self.store._append_once(stream_id, expected_version, batch, self.conn)
        except (RetryRace, asyncpg.DeadlockDetectedError, asyncpg.SerializationError) as exc:
            why = "a concurrent append won" if isinstance(exc, RetryRace) else str(exc)
            raise await self.store.conflict(stream_id, expected_version,
                                            f"{why}; retry the transaction") from None


class EventStore:
    """Async API over the log. Open with `async with EventStore.open() as store:`."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, registry: EventRegistry) -> None:
        self.pool = pool
        self.dsn = dsn
        self.registry = registry
        self.reader = Reader(pool, registry)
        self.checkpoints = Checkpoints(pool)
        self.sql = Sql(pool)  # the layers above run their statements here, not on the pool

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        dsn: str | None = None,
        *,
        registry: EventRegistry,
        max_connections: int = 10,
        check_schema: bool = True,
    ) -> AsyncIterator[EventStore]:
        """Connect (as the service, see `database.resolve_service_dsn`, when `dsn` is
        None), check the schema."""
        dsn = dsn or database.resolve_service_dsn()
        log.info("using PostgreSQL at %s", database.redact(dsn))
        async with database.pool(dsn, max_size=max_connections) as pool:
            if check_schema:
                async with pool.acquire() as conn:
                    await migrate.require_current(conn)
            yield cls(pool, dsn, registry)

    # -- append -----------------------------------------------------------------------------

    async def append(
        self,
        stream_id: str,
        events: Sequence[Event | NewEvent],
        *,
        expected_version: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AppendResult:
        """Append `events` to `stream_id` atomically: all of them or none.

        `expected_version`: None = whatever the stream's version; 0 = the stream must not
        exist yet; n = the stream must be exactly at version n. Otherwise
        `ConcurrencyConflict` names the stream and both versions. Re-appending the same event
        ids (a retry) writes nothing and says `already_stored`. `metadata` is merged under
        each event's own metadata (correlation id, causation id, actor, ...).
        """
        batch = prepare(self.registry, stream_id, events, expected_version, metadata)
        try:
            return await retries.appending(
                lambda: self._append_once(stream_id, expected_version, batch),
                self.ensure_partitions)
        except RetryRace:
            raise await self.conflict(stream_id, expected_version,
                                      "concurrent appends kept racing") from None
        except database.CONNECTION_ERRORS as exc:
            raise errors.StoreUnavailable(
                f"append to {stream_id} failed: cannot reach PostgreSQL at "
                f"{database.redact(self.dsn)} ({exc}). Retrying with the same event ids is safe."
            ) from exc

    async def append_many(
        self,
        batches: Sequence[tuple[str, Sequence[Event | NewEvent]]],
        *,
        metadata: dict[str, Any] | None = None,
    ) -> list[AppendResult]:
        """Append to many streams in one COPY, all or nothing; each stream continues at its
        current version (no expected version). For bulk writers: re-scoring, imports.

        Idempotent per stream: a batch whose event ids are all stored in its stream already
        is left out and reported `already_stored`; a batch only partly stored is refused.
        """
        streams = [stream for stream, _ in batches]
        if len(set(streams)) != len(streams):
            raise errors.InvalidEvent("append_many takes each stream once")
        prepared = {stream: prepare(self.registry, stream, events, None, metadata)
                    for stream, events in batches}
        stored: dict[str, AppendResult] = {}

        async def attempt() -> None:
            todo = [s for s in streams if s not in stored]
            if not todo:
                return
            current = {r[0]: r[1] for r in await self.pool.fetch(_Q["stream_versions"], todo)}
            records = [row for s in todo for row in prepared[s].rows(s, current.get(s, 0))]
            try:
                await self.pool.copy_records_to_table(
                    "events", schema_name="props", columns=COPY_COLUMNS, records=records)
            except asyncpg.UniqueViolationError:
                await self._find_stored(todo, prepared, stored)  # the retries among them
                raise
            for s in todo:
                n = len(prepared[s].ids)
                base = current.get(s, 0)
                stored[s] = AppendResult(s, base + 1, base + n, already_stored=False)

        rows = sum(len(p.ids) for p in prepared.values())
        try:
            await retries.appending(attempt, lambda: self.ensure_partitions(rows))
        except asyncpg.PostgresError as exc:
            raced = isinstance(exc, asyncpg.UniqueViolationError) or errors.stream_moved(exc)
            if not raced:
                raise
            if len(stored) < len(streams):  # (the last race may have stored them all)
                raise await self.conflict(
                    streams[0], None, "append_many kept racing with other writers") from None
        return [stored[s] for s in streams]

    async def _find_stored(self, streams: list[str], prepared: dict[str, Batch],
                           stored: dict[str, AppendResult]) -> None:
        """After a unique violation in a bulk append: which batches are retries."""
        ids = [i for s in streams for i in prepared[s].ids]
        rows = await self.pool.fetch(_Q["stored_by_stream"], ids)
        found = {r["stream_id"]: r for r in rows}
        for s in streams:
            row = found.get(s)
            n = len(prepared[s].ids)
            if row is None:
                continue
            if row["found"] != n:
                raise errors.DuplicateEventConflict(
                    f"append to {s} refused: {row['found']} of its {n} event ids are already "
                    f"stored; an event id may be used once, in one stream")
            stored[s] = AppendResult(s, row["last"] - n + 1, row["last"], already_stored=True)
        total = sum(r["found"] for r in rows)
        if total > sum(len(prepared[s].ids) for s in found if s in streams):
            raise errors.DuplicateEventConflict(
                "some event ids of this bulk append are already stored in other streams")

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[StoreTransaction]:
        """Several appends (to several streams) that commit together or not at all.

        `async with store.transaction() as tx: await tx.append(...); await tx.append(...)`.
        Keep it short: while it is open, its transaction holds the read fence for everyone.
        """
        with errors.translated():  # what the log's triggers refused, by name
            async with self.pool.acquire() as conn, conn.transaction():
                yield StoreTransaction(self, conn)

    async def _insert(self, target: asyncpg.Pool | database.Connection, stream_id: str,
                      expected: int | None, batch: Batch) -> tuple[int, int | None]:
        """Send the append; return (events inserted, last version). Driver errors propagate."""
        n = len(batch.ids)
        if expected is not None and n >= COPY_THRESHOLD:
            # The writer knows the versions: COPY, whose bulk insert beats any INSERT.
            # The dense-version trigger refuses it if the stream is not at `expected`.
            await target.copy_records_to_table(
                "events", schema_name="props", columns=COPY_COLUMNS,
                records=batch.rows(stream_id, expected),
            )
            return n, expected + n
        if n == 1:
            last = await target.fetchval(
                _Q["append_one"], stream_id, expected, batch.ids[0], batch.types[0],
                batch.versions[0], batch.data[0], batch.metadata[0],
            )
            return (0, None) if last is None else (1, last)
        row = await target.fetchrow(
            _Q["append_events"], stream_id, expected, batch.ids, batch.types,
            batch.versions, batch.data, batch.metadata,
        )
        assert row is not None  # an aggregate: always one row
        return row[0], row[1]

    async def _append_once(self, stream_id: str, expected: int | None, batch: Batch,
                           conn: database.Connection | None = None) -> AppendResult:
        """One attempt, on the pool or inside the caller's transaction (`conn`)."""
        try:
            if conn is None:
                count, last = await self._insert(self.pool, stream_id, expected, batch)
            else:
                # A savepoint: a refused append leaves the caller's transaction usable.
                async with conn.transaction():
                    count, last = await self._insert(conn, stream_id, expected, batch)
        except asyncpg.UniqueViolationError:
            return await self._explain_refusal(stream_id, expected, batch, conn)
        except asyncpg.PostgresError as exc:
            if errors.missing_partition(exc):
                await self.ensure_partitions()
                raise RetryRace() from exc
            if not errors.stream_moved(exc):
                raise
            if expected is None:
                raise RetryRace() from exc
            actual = int(getattr(exc, "detail", None) or 0)
            raise errors.ConcurrencyConflict(stream_id, expected, actual) from None
        if count == 0 or last is None:  # the stream was not at the expected version
            return await self._explain_refusal(stream_id, expected, batch, conn)
        n = len(batch.ids)
        return AppendResult(stream_id, last - n + 1, last, already_stored=False)

    async def _explain_refusal(self, stream_id: str, expected: int | None, batch: Batch,
                               conn: database.Connection | None = None) -> AppendResult:
        """An append wrote nothing: a retry of a stored append (a no-op), or a conflict.
        Asked on the append's own connection: inside a caller's transaction, what that
        transaction wrote is what the pool cannot see."""
        row = await (conn or self.pool).fetchrow(_Q["stored_event_ids"], batch.ids, stream_id)
        assert row is not None  # an aggregate: always one row
        found, in_stream, last = row
        n = len(batch.ids)
        if in_stream == n:
            return AppendResult(stream_id, last - n + 1, last, already_stored=True)
        if found:
            raise errors.DuplicateEventConflict(
                f"append to {stream_id} refused: {found} of its {n} event ids are already stored "
                f"({in_stream} in this stream); an event id may be used once, in one stream"
            )
        if expected is None:
            raise RetryRace()  # another writer took the same versions: go again
        raise await self.conflict(stream_id, expected, conn=conn)

    async def ensure_partitions(self, room: int = 0) -> int:
        """Make the log's partitions reach past the next position (and `room` more)."""
        return await partitions.ensure(self.pool, room)

    async def conflict(self, stream_id: str, expected: int | None, why: str = "",
                       conn: database.Connection | None = None) -> errors.ConcurrencyConflict:
        """The one way a version conflict is reported: the stream's version as it stands
        (as `conn`'s transaction sees it), and why the append gave up."""
        return errors.ConcurrencyConflict(stream_id, expected,
                                          await self.stream_version(stream_id, conn),
                                          f" ({why})" if why else "")

    async def stream_version(self, stream_id: str,
                             conn: database.Connection | None = None) -> int:
        """The stream's last version; 0 if it has no event (on `conn`: as its transaction
        sees it)."""
        version: int = await (conn or self.pool).fetchval(_Q["stream_version"], stream_id)
        return version

    # -- reads, checkpoints, the fence: the parts' own, as the store's --------------------

    async def read_stream(self, stream_id: str, *, from_version: int = 1,
                          limit: int | None = None) -> list[RecordedEvent]:
        """Events of one stream in version order (see `Reader.read_stream`)."""
        return await self.reader.read_stream(stream_id, from_version=from_version, limit=limit)

    async def read_streams(self, stream_ids: Sequence[str]) -> dict[str, list[RecordedEvent]]:
        """Several whole streams at once (see `Reader.read_streams`)."""
        return await self.reader.read_streams(stream_ids)

    async def existing_streams(self, stream_ids: Sequence[str]) -> set[str]:
        """Which of these streams have an event."""
        return {r[0] for r in await self.pool.fetch(_Q["stream_versions"], list(stream_ids))}

    async def read_all(self, after: Checkpoint = START, *, category: str | None = None,
                       limit: int = 1000) -> list[RecordedEvent]:
        """Up to `limit` events after `after`, behind the fence (see `Reader.read_all`)."""
        return await self.reader.read_all(after, category=category, limit=limit)

    def iter_all(self, after: Checkpoint = START, *, category: str | None = None,
                 types: Sequence[str] | None = None,
                 batch_size: int = 1000) -> AsyncIterator[list[RecordedEvent]]:
        """Batches from `after` until the fence (see `Reader.iter_all`)."""
        return self.reader.iter_all(after, category=category, types=types,
                                    batch_size=batch_size)

    async def analyze_stale_partitions(self) -> list[str]:
        return await partitions.analyze_stale(self.pool)

    async def fence_status(self, max_blockers: int = 5) -> fence.FenceStatus:
        return await fence.status(self.pool, max_blockers)

    async def find_checkpoint(self, name: str) -> Checkpoint | None:
        return await self.checkpoints.find(name)

    async def load_checkpoint(self, name: str) -> Checkpoint:
        return await self.checkpoints.load(name)

    async def save_checkpoint(self, name: str, expected: Checkpoint, new: Checkpoint, *,
                              conn: database.Connection | None = None) -> None:
        """Compare-and-set (see `Checkpoints.save`)."""
        await self.checkpoints.save(name, expected, new, conn=conn)

    def subscribe(
        self,
        after: Checkpoint = START,
        *,
        category: str | None = None,
        batch_size: int = 1000,
        poll_interval: float = 1.0,
        decode: DecodeFilter | None = None,
    ) -> Subscription:
        """Follow the log live from `after`: `async with store.subscribe() as sub:`.
        With `decode`, only the events it accepts are decoded (the others are delivered as
        `NotDecoded`, envelope only)."""
        from props.core.log.subscription import Subscription

        return Subscription(
            self, after, category=category, batch_size=batch_size, poll_interval=poll_interval,
            decode=decode,
        )

    # -- blobs ------------------------------------------------------------------------------

    async def put_blob(self, data: bytes) -> str:
        """Store bytes once (zstd-compressed); return their sha256 hex, the key to `get_blob`."""
        return await blobs.put(self.pool, data)

    async def get_blob(self, sha256: str) -> bytes:
        return await blobs.get(self.pool, sha256)

    async def get_blobs(self, sha256s: Sequence[str]) -> dict[str, bytes]:
        """Several blobs in one round trip, by hash (those stored)."""
        return await blobs.get_many(self.pool, list(sha256s))


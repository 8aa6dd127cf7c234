"""The event store: append to streams, read streams and the global log, blobs, checkpoints.

Writes go through one SQL function (`props.append_events`) in one round trip, so an append is
atomic, checks the expected version and is idempotent by event id. Reads of the global log go
through the visibility fence (see `read_all`), so a consumer that checkpoints
`(tx_id, global_position)` never skips an event committed out of order.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg
import orjson
import tenacity

from props.core import blobs, database, errors
from props.core.catalog import REGISTRY
from props.core.events import Event, EventRegistry, NewEvent, RecordedEvent
from props.schema import migrate, queries

if TYPE_CHECKING:
    from props.core.subscription import Subscription

log = logging.getLogger(__name__)
_Q = queries.load("events")

STREAM_ID = re.compile(r"^[a-z][a-z0-9_]*-\S+$")
MAX_BATCH = 10_000


@dataclasses.dataclass(frozen=True, order=True)
class Checkpoint:
    """A position in the global read order: (transaction id, global position)."""

    tx_id: int
    position: int

    def __str__(self) -> str:
        return f"{self.tx_id}:{self.position}"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        tx, _, pos = text.partition(":")
        try:
            return cls(int(tx), int(pos))
        except ValueError:
            raise errors.PropsError(
                f"checkpoint {text!r} is not TX:POSITION (e.g. 0:0 for the start)"
            ) from None


START = Checkpoint(0, 0)


@dataclasses.dataclass(frozen=True)
class AppendResult:
    stream_id: str
    positions: list[int]
    stream_version: int  # of the last event of the batch
    already_stored: bool  # a retried append: nothing new was written


@dataclasses.dataclass(frozen=True)
class FenceBlocker:
    pid: int
    database: str | None
    user: str | None
    application: str | None
    state: str | None
    age_seconds: float
    xid: str


@dataclasses.dataclass(frozen=True)
class FenceStatus:
    """Where the visibility fence stands and what, if anything, holds it back."""

    fence_xid: int
    last_visible: Checkpoint | None
    held_back: int  # events written by transactions at or past the fence
    blockers: list[FenceBlocker]

    def describe(self) -> str:
        if not self.held_back:
            return "fence is clear: every committed event is readable"
        who = ", ".join(
            f"pid {b.pid} ({b.state or '?'}, {b.age_seconds:.1f}s, db {b.database})"
            for b in self.blockers
        )
        return (
            f"{self.held_back} event(s) wait behind the fence; running transactions holding "
            f"it: {who or 'none seen (they may have just ended)'}"
        )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, database.CONNECTION_ERRORS):
        return True
    return isinstance(exc, asyncpg.PostgresError) and exc.sqlstate in (
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
    )


def _retryable(exc: BaseException) -> bool:
    return _transient(exc) or isinstance(exc, _RetryRace)


class _RetryRace(Exception):
    """Two appends raced on the same stream or event id: re-run the append (same ids)."""


class EventStore:
    """Async API over the log. Open with `async with EventStore.open() as store:`."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, registry: EventRegistry = REGISTRY) -> None:
        self.pool = pool
        self.dsn = dsn
        self.registry = registry

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        dsn: str | None = None,
        *,
        registry: EventRegistry = REGISTRY,
        max_connections: int = 10,
        check_schema: bool = True,
    ) -> AsyncIterator[EventStore]:
        """Connect (PROPS_DSN or the embedded server when `dsn` is None), check the schema."""
        dsn = dsn or database.resolve_dsn()
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
        ids (a retry) writes nothing and returns the stored positions. `metadata` is merged
        under each event's own metadata (correlation id, causation id, actor, ...).
        """
        if not STREAM_ID.match(stream_id):
            raise errors.InvalidEvent(
                f"stream id {stream_id!r} is not <category>-<id> (category: lowercase letters, "
                f"digits, _; e.g. run-3f2a...)"
            )
        if not events:
            raise errors.InvalidEvent(f"nothing to append to {stream_id}: the batch is empty")
        if len(events) > MAX_BATCH:
            raise errors.PayloadTooLarge(
                f"{len(events):,} events in one append; at most {MAX_BATCH:,}: split the batch"
            )
        if expected_version is not None and expected_version < 0:
            raise errors.InvalidEvent(f"expected_version must be None, 0 or positive, not "
                                      f"{expected_version}")
        args = self._encode(events, metadata or {})

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(_retryable),
            wait=tenacity.wait_exponential_jitter(multiplier=0.02, max=1.0, jitter=0.02),
            stop=tenacity.stop_after_attempt(6),
            reraise=True,
        )
        try:
            # Every attempt sends the same event ids: a retry after an append that did commit
            # (the answer was lost) is a no-op, never a duplicate.
            return await retrying(self._append_once, stream_id, expected_version, args)
        except _RetryRace:
            version = await self.stream_version(stream_id)
            raise errors.ConcurrencyConflict(
                stream_id, expected_version, version, " (concurrent appends kept racing)"
            ) from None
        except database.CONNECTION_ERRORS as exc:
            raise errors.StoreUnavailable(
                f"append to {stream_id} failed: cannot reach PostgreSQL at "
                f"{database.redact(self.dsn)} ({exc}). Retrying with the same event ids is safe."
            ) from exc

    def _encode(self, events: Sequence[Event | NewEvent], common: dict[str, Any]) -> tuple[
        list[uuid.UUID], list[str], list[int], list[str], list[str]
    ]:
        ids: list[uuid.UUID] = []
        types: list[str] = []
        versions: list[int] = []
        data: list[str] = []
        metas: list[str] = []
        for item in events:
            new = item if isinstance(item, NewEvent) else NewEvent(item)
            if not isinstance(new.event, Event):
                raise errors.InvalidEvent(f"not an event: {type(new.event).__name__}")
            ids.append(new.event_id)
            types.append(new.event.type_name)
            versions.append(new.event.schema_version)
            data.append(self.registry.encode(new.event))
            meta = {**common, **new.metadata} if common else new.metadata
            try:
                metas.append(orjson.dumps(meta).decode())
            except TypeError as exc:
                raise errors.InvalidEvent(f"metadata is not JSON-serialisable: {exc}") from exc
        if len(set(ids)) != len(ids):
            raise errors.InvalidEvent("the batch repeats an event id")
        return ids, types, versions, data, metas

    async def _append_once(
        self,
        stream_id: str,
        expected: int | None,
        args: tuple[list[uuid.UUID], list[str], list[int], list[str], list[str]],
    ) -> AppendResult:
        ids = args[0]
        try:
            rows = await self.pool.fetch(_Q["append_events"], stream_id, expected, *args)
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name == "events_stream_version_key" and expected is not None:
                actual = await self.stream_version(stream_id)
                raise errors.ConcurrencyConflict(stream_id, expected, actual) from None
            raise _RetryRace() from exc  # same event ids or an "any" race: run it again
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == "PX409":
                actual = int(getattr(exc, "detail", None) or 0)
                if expected is None:
                    raise _RetryRace() from exc
                raise errors.ConcurrencyConflict(stream_id, expected, actual) from None
            if exc.sqlstate == "PX410":
                raise errors.DuplicateEventConflict(
                    f"append to {stream_id} refused: {getattr(exc, 'detail', '')}; an event id "
                    f"may be used once, in one stream"
                ) from None
            raise
        return AppendResult(
            stream_id, [r[0] for r in rows], rows[-1][1], already_stored=not rows[0][2]
        )

    async def stream_version(self, stream_id: str) -> int:
        """The stream's last version; 0 if it has no event."""
        version: int = await self.pool.fetchval(_Q["stream_version"], stream_id)
        return version

    # -- read -------------------------------------------------------------------------------

    def _decode(self, rows: Iterable[asyncpg.Record]) -> list[RecordedEvent]:
        decode = self.registry.decode
        loads = orjson.loads
        return [
            RecordedEvent(gp, tx, eid, sid, sv, typ, schv, decode(typ, schv, data), loads(meta), at)
            for gp, tx, eid, sid, sv, typ, schv, data, meta, at in rows
        ]

    async def read_stream(
        self, stream_id: str, *, from_version: int = 1, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Events of one stream in version order (streams are read directly, no fence)."""
        rows = await self.pool.fetch(_Q["read_stream"], stream_id, from_version, limit)
        return self._decode(rows)

    async def read_all(
        self, after: Checkpoint = START, *, category: str | None = None, limit: int = 1000
    ) -> list[RecordedEvent]:
        """Up to `limit` events after `after` in global read order, behind the visibility fence.

        Rows are ordered by (tx_id, global_position) and only rows of transactions older than
        every transaction still running are returned: any row that could still appear
        before them is already visible. Checkpoint the last event's (tx_id, global_position).
        `category` keeps only streams `<category>-...`.
        """
        if category is None:
            rows = await self.pool.fetch(_Q["read_all"], after.tx_id, after.position, limit)
        else:
            rows = await self.pool.fetch(
                _Q["read_category"], after.tx_id, after.position, limit, category
            )
        return self._decode(rows)

    async def iter_all(
        self, after: Checkpoint = START, *, category: str | None = None, batch_size: int = 1000
    ) -> AsyncIterator[list[RecordedEvent]]:
        """Batches from `after` until the fence is reached (a catch-up, not a subscription)."""
        while True:
            batch = await self.read_all(after, category=category, limit=batch_size)
            if not batch:
                return
            yield batch
            last = batch[-1]
            after = Checkpoint(last.tx_id, last.global_position)

    async def fence_status(self, max_blockers: int = 5) -> FenceStatus:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(_Q["head"])
            blockers: list[FenceBlocker] = []
            if row["held_back"]:
                blockers = [
                    FenceBlocker(r["pid"], r["datname"], r["usename"], r["application_name"],
                                 r["state"], r["age_seconds"] or 0.0, r["xid"])
                    for r in await conn.fetch(_Q["fence_blockers"], max_blockers)
                ]
        last = None
        if row["fenced"]:
            tx, pos = row["fenced"].strip("()").split(",")
            last = Checkpoint(int(tx), int(pos))
        return FenceStatus(row["fence"], last, row["held_back"], blockers)

    def subscribe(
        self,
        after: Checkpoint = START,
        *,
        category: str | None = None,
        batch_size: int = 1000,
        poll_interval: float = 1.0,
    ) -> Subscription:
        """Follow the log live from `after`: `async with store.subscribe() as sub:`."""
        from props.core.subscription import Subscription

        return Subscription(
            self, after, category=category, batch_size=batch_size, poll_interval=poll_interval
        )

    # -- blobs ------------------------------------------------------------------------------

    async def put_blob(self, data: bytes) -> str:
        """Store bytes once (zstd-compressed); return their sha256 hex, the key to `get_blob`."""
        return await blobs.put(self.pool, data)

    async def get_blob(self, sha256: str) -> bytes:
        return await blobs.get(self.pool, sha256)

    # -- checkpoints ------------------------------------------------------------------------

    async def load_checkpoint(self, name: str) -> Checkpoint:
        row = await self.pool.fetchrow(_Q["load_checkpoint"], name)
        return START if row is None else Checkpoint(row["tx_id"], row["position"])

    async def save_checkpoint(
        self,
        name: str,
        expected: Checkpoint,
        new: Checkpoint,
        *,
        conn: asyncpg.Connection | None = None,
    ) -> None:
        """Move checkpoint `name` from `expected` to `new` (compare-and-set).

        Pass the connection of the transaction that writes the consumer's effects, so rows
        and checkpoint commit together. `CheckpointConflict` if another consumer moved it.
        """
        target: asyncpg.Connection | asyncpg.Pool = conn if conn is not None else self.pool
        if expected == START:
            done = await target.fetchval(_Q["start_checkpoint"], name, new.tx_id, new.position)
        else:
            done = await target.fetchval(
                _Q["move_checkpoint"], name, expected.tx_id, expected.position,
                new.tx_id, new.position,
            )
        if done is None:
            raise errors.CheckpointConflict(
                f"checkpoint {name!r} is no longer at {expected}: another consumer moved it. "
                f"Only one consumer may own a checkpoint; this one must stop."
            )

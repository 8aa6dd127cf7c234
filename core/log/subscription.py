"""Follow the log live: LISTEN as a hint, poll as the guarantee, reconnect when cut off.

The subscription LISTENs on a dedicated connection *before* it catches up, then alternates
"read everything behind the fence" and "wait for a notification or the poll timeout". A lost
listener connection is re-opened (retries.FOLLOW) while reads go on through the pool; after a
reconnect it reads again from its position, so a notification lost in between costs at most a
poll interval, never an event. Reads that fail because the server is gone are retried
(FOLLOW again): a subscription outlives a database restart.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import asyncpg

from props.core.log import database, retries, stopping
from props.core.log.events import DecodeFilter, RecordedEvent

if TYPE_CHECKING:
    from props.core.log.checkpoints import Checkpoint
    from props.core.log.store import EventStore

log = logging.getLogger(__name__)

CHANNEL = "props_events"


def _setter(event: anyio.Event) -> Any:
    return lambda *_: event.set()


class Subscription(anyio.AsyncContextManagerMixin):
    """`async with store.subscribe(after) as sub: async for batch in sub: ...`

    Each batch is a list of events in global read order; `sub.position` is the checkpoint
    after the last event delivered. Consumers that need exactly-once effects store that
    checkpoint in the same transaction as their effects and resume from it.
    """

    def __init__(
        self,
        store: EventStore,
        after: Checkpoint,
        *,
        category: str | None,
        batch_size: int,
        poll_interval: float,
        stall_warning_seconds: float = 10.0,
        decode: DecodeFilter | None = None,
    ) -> None:
        self.store = store
        self.decode = decode
        self.position = after
        self.category = category
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.stall_warning_seconds = stall_warning_seconds
        self.listening = False
        self.listener_pid: int | None = None
        self.reconnects = 0
        self.notifications = 0
        self._wake = anyio.Event()
        self._first_attempt = anyio.Event()  # the listener tried once (connected or not)
        # A connection of its own, not a pooled one: held for the subscription's life, and
        # dropped when broken without any doubt about whose connection it was.
        self._reader: asyncpg.Connection | None = None
        self._last_stall_check = 0.0

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Subscription]:
        consumer_error: BaseException | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._listen_forever, name="props-subscription-listener")
                # LISTEN before the first read: nothing appended during catch-up goes unnoticed.
                await self._first_attempt.wait()
                try:
                    yield self
                except BaseException as exc:
                    # The consumer's own exception propagates as it is, not wrapped in the
                    # task group's ExceptionGroup, once the listener (ours to stop) stopped.
                    consumer_error = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            await self._drop_reader()
        if consumer_error is not None:
            raise consumer_error

    # -- the listener -----------------------------------------------------------------------

    def _on_notify(self, *_: Any) -> None:
        self.notifications += 1
        self._wake.set()

    async def _listen_forever(self) -> None:
        """Hold a listener connection; while there is none, reads poll, and another is
        opened under FOLLOW."""
        while True:  # one connection a pass, from its first try to its loss
            await retries.FOLLOW.call(self._listen, retries.of_kinds(*database.UNAVAILABLE),
                                      on_retry=self._unheard)
            await anyio.sleep(retries.FOLLOW.first)

    def _unheard(self, exc: BaseException, _: int) -> None:
        log.warning("subscription listener unavailable (%s); polling meanwhile", exc)

    async def _listen(self) -> None:
        """One listener connection, from its connect to its loss."""
        health_every = max(1.0, self.poll_interval * 5)
        conn: asyncpg.Connection | None = None
        try:
            # Let a started connect finish (up to 10 s) even when cancelled: asyncpg
            # reports a handshake cut in the middle as an error of the event loop.
            with stopping.shield("a listener's connect", at_most=10) as connecting:
                conn = await database.connect(self.store.dsn)
            if conn is None or connecting.abandoned:
                raise TimeoutError("connecting the listener took over 10 s")
            lost = anyio.Event()
            conn.add_termination_listener(_setter(lost))
            await conn.add_listener(CHANNEL, self._on_notify)
            self.listener_pid = conn.get_server_pid()
            self.listening = True
            if self._first_attempt.is_set():
                self.reconnects += 1
                log.info("subscription listener reconnected (pid %s)", self.listener_pid)
            self._wake.set()  # re-read: a notification may have been lost meanwhile
            self._first_attempt.set()
            while not lost.is_set() and await self._alive(conn, lost, health_every):
                pass
            log.warning("subscription listener connection lost; polling until it is back")
        finally:
            self.listening = False
            if conn is not None and not conn.is_closed():
                conn.terminate()
            self._first_attempt.set()
            self._wake.set()

    @staticmethod
    async def _alive(conn: asyncpg.Connection, lost: anyio.Event, every: float) -> bool:
        """Wait `every` seconds for a loss; then ask: a half-open socket never reports
        loss, a ping does."""
        with anyio.move_on_after(every):
            await lost.wait()
        if lost.is_set():
            return False
        try:
            with anyio.fail_after(every):
                await conn.fetchval("SELECT 1")
        except database.UNAVAILABLE:
            return False
        return True

    # -- delivery ---------------------------------------------------------------------------

    async def _read(self) -> list[RecordedEvent]:
        """The next page behind the fence, on a connection kept for this subscription (a
        wake-up then costs one round trip, no pool hand-over)."""
        async def attempt() -> list[RecordedEvent]:
            if self._reader is None:
                self._reader = await database.connect(self.store.dsn)
            rows = await self.store.reader.page(
                self.position, self.category, self.batch_size, self._reader
            )
            return self.store.reader.decode(rows, self.decode)

        return await retries.FOLLOW.call(attempt, retries.of_kinds(*database.UNAVAILABLE),
                                         on_retry=self._read_failed)

    def _read_failed(self, exc: BaseException, _: int) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.is_closed():
            reader.terminate()
        log.warning("subscription read failed (%s); retrying", exc)

    async def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is None or reader.is_closed():
            return
        with stopping.shield("a subscription's reader: its close", at_most=5):
            await reader.close()

    async def _check_stall(self) -> None:
        """When caught up, now and then ask whether a long transaction holds the fence."""
        now = time.monotonic()
        if now - self._last_stall_check < min(5.0, self.stall_warning_seconds):
            return
        self._last_stall_check = now
        try:
            status = await self.store.fence_status()
        except database.UNAVAILABLE:
            return
        old = [b for b in status.blockers if b.age_seconds >= self.stall_warning_seconds]
        if status.held_back and old:
            log.warning("log fence held back: %s", status.describe())

    async def __aiter__(self) -> AsyncIterator[list[RecordedEvent]]:
        from props.core.log.checkpoints import Checkpoint

        quick = 0  # woken but nothing readable yet: the fence is held, look again soon
        while True:
            self._wake = anyio.Event()  # before the read: a notify during it is not lost
            batch = await self._read()
            if batch:
                quick = 0
                last = batch[-1]
                self.position = Checkpoint(last.tx_id, last.global_position)
                yield batch
                if len(batch) == self.batch_size:
                    continue  # a full page: more is likely readable right away
            else:
                await self._check_stall()
            if quick:
                timeout = min(self.poll_interval, 0.005 * 2**quick)
            else:
                timeout = self.poll_interval
            woken = False
            with anyio.move_on_after(timeout):
                await self._wake.wait()
                woken = True
            # Woken, yet the last read found nothing: a transaction older than the new rows
            # may still hold the fence. Re-read soon, backing off to the poll interval.
            quick = min(quick + 1, 16) if (woken and not batch) or quick else 0


class Wakeups(anyio.AsyncContextManagerMixin):
    """A hint that the log moved, for a client that reads what it needs itself (an
    evaluation's driver): `async with Wakeups(store) as w: await w.wait(0.5)` returns soon after the
    next append's NOTIFY, or after 0.5 s. Without a listener (the database briefly
    away) it is a timer: the caller's reads stay the guarantee, as a subscription's do."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._wake = anyio.Event()
        self._returned = -math.inf  # when the last wait returned (anyio's clock)

    @asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncGenerator[Wakeups]:
        conn: asyncpg.Connection | None = None
        try:
            conn = await database.connect(self.store.dsn)
            # Through a method, not `_setter(self._wake)`: each wait replaces the event, and
            # a listener holding the first one woke the first wait only (every later one
            # ran to its timeout: an evaluation's driver looked every 0.5 s, not on appends).
            await conn.add_listener(CHANNEL, self._on_notify)
        except database.UNAVAILABLE as exc:
            log.warning("no listener for wake-ups (%s): polling", exc)
        try:
            yield self
        finally:
            if conn is not None and not conn.is_closed():
                with stopping.shield("a listener: its close"):
                    await conn.close(timeout=5)

    def _on_notify(self, *_: Any) -> None:
        self._wake.set()

    async def wait(self, at_most: float, apart: float = 0.02) -> None:
        """Until the log moves, but not sooner than `apart` seconds after the last wait
        returned (a busy log wakes its reader at most 1/`apart` times a second, a burst of
        appends once or twice), or `at_most` seconds. An append after a quiet spell wakes it
        at once: a sleep after every wake-up (as before) added its length to each."""
        with anyio.move_on_after(at_most):
            await self._wake.wait()
            await anyio.sleep(max(0.0, self._returned + apart - anyio.current_time()))
        self._wake = anyio.Event()
        self._returned = anyio.current_time()

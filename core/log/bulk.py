"""Helpers of bulk work (a rebuild, a rescore, a catch-up read): the cyclic GC paused while
thousands of acyclic objects are made, derived ids made cheaply, and one write in flight
while the next chunk is prepared.
"""

from __future__ import annotations

import contextlib
import gc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Generic, TypeVar

import anyio
import anyio.abc
from asyncpg.pgproto.pgproto import UUID as _FastUUID

from props.core.log import stopping

T = TypeVar("T")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for a stretch of bulk work. Decoding and folding events make
    thousands of acyclic objects (refcounting frees them); meanwhile each collection walks
    the whole heap, a third of a decode's time and more of a rebuild's (measured: bench log,
    bench projections). Nested pauses are fine; cycles made meanwhile wait for the end."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def uuid_from_hash(digest: bytes, version: int) -> uuid.UUID:
    """A name-based UUID of `version` from a hash digest of its name (sha1 for version 5, as
    `uuid.uuid5`; anything for version 8), at a third of `uuid.UUID`'s cost: built in C by
    asyncpg's class (a `uuid.UUID` subclass, the one it returns for uuid columns). For ids
    derived per event in bulk."""
    raw = bytearray(digest[:16])
    raw[6] = (raw[6] & 0x0F) | (version << 4)
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return _FastUUID(bytes(raw))


class WriteAhead(anyio.AsyncContextManagerMixin, Generic[T]):
    """One write in flight while the next chunk is prepared: the server writes the last
    chunk while Python makes the next. Writes happen one at a time and in submission order,
    so a chunk never overtakes the one before it (merges and checkpoints stay ordered). A
    failed write is raised by the next `submit` or by `settle`.

    `async with WriteAhead(...) as writer:` runs the writes in the block's own task group
    (no task outlives it): the last write is settled on the way out, or landed when the block
    fails, and the block's own error is raised as it was, not inside an exception group."""

    def __init__(self, written: Callable[[T], None] | None = None) -> None:
        self.written = written  # told each write's result, in order
        self._group: anyio.abc.TaskGroup | None = None
        self._writing: _Write[T] | None = None

    @contextlib.asynccontextmanager
    async def __asynccontextmanager__(self) -> AsyncIterator[WriteAhead[T]]:
        failed: BaseException | None = None
        async with anyio.create_task_group() as self._group:
            try:
                yield self
                await self.settle()
            except BaseException as exc:  # kept for after the group: raised as it came
                failed = exc
                await self.land()
            finally:
                self._group = None
        if failed is not None:
            raise failed

    async def submit(self, write: Awaitable[T]) -> None:
        """Wait for the write in flight, then start `write` in the background. The caller
        must await (e.g. `anyio.lowlevel.checkpoint()`) now and then for it to progress."""
        if self._group is None:
            raise RuntimeError("WriteAhead.submit outside `async with WriteAhead() as w:`")
        await self.settle()
        self._writing = _Write(write)
        self._group.start_soon(self._writing.run, name="props-write-ahead")

    async def settle(self) -> None:
        """Wait for the write in flight, if any."""
        if self._writing is None:
            return
        writing, self._writing = self._writing, None
        result = await writing.outcome()
        if self.written is not None:
            self.written(result)

    async def land(self) -> None:
        """On a failure elsewhere, the write in flight still lands: what was done before the
        failure is kept, and work resumed later starts after it. Should it fail too, the
        first failure is the one raised."""
        if self._writing is None:
            return
        with stopping.shield("a bulk write in flight"), contextlib.suppress(Exception):
            await self.settle()


class _Write(Generic[T]):
    """One write run in a task group, its result or error kept for whoever waits on it (an
    error raised inside the task would cancel the group instead of reaching the caller)."""

    def __init__(self, write: Awaitable[T]) -> None:
        self._write = write
        self._done = anyio.Event()
        self._result: T | None = None
        self._error: Exception | None = None

    async def run(self) -> None:
        try:
            self._result = await self._write
        except Exception as exc:
            self._error = exc
        finally:
            self._done.set()

    async def outcome(self) -> T:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # set when no error

"""The one retry policy of every append path: the store's appends (one stream, many streams),
imports, and grades written by the server.

An attempt is retried when what stopped it is over by the next one: the connection went away,
a serialization failure or deadlock, a concurrent writer moved a stream or stored the same ids
first (the next attempt re-reads versions and skips what is stored), or the insert ran past
the last partition (made before the next attempt). Every attempt sends the same event ids, so
an attempt that did commit but whose answer was lost makes the retry a no-op, never a
duplicate. The first retry follows at once (a race is usually over); later ones back off.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import asyncpg

from props.core.log import database, errors

T = TypeVar("T")

ATTEMPTS = 5
TRANSIENT_STATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock


class RetryRace(Exception):
    """Two appends raced on the same stream or event id: run the attempt again (same ids)."""


def transient(exc: BaseException) -> bool:
    """The database went away or aborted the transaction for a reason of its own."""
    return isinstance(exc, database.CONNECTION_ERRORS) or \
        errors.sqlstate(exc) in TRANSIENT_STATES


def retryable(exc: BaseException) -> bool:
    return (transient(exc) or isinstance(exc, RetryRace | asyncpg.UniqueViolationError)
            or errors.stream_moved(exc) or errors.missing_partition(exc))


async def appending(attempt: Callable[[], Awaitable[T]],
                    make_room: Callable[[], Awaitable[object]]) -> T:
    """`await attempt()` until it succeeds, under the policy above; `make_room()` adds the
    partitions a next attempt needs. The last failure propagates as it is."""
    for number in range(1, ATTEMPTS + 1):
        try:
            return await attempt()
        except Exception as exc:
            if number == ATTEMPTS or not retryable(exc):
                raise
            if errors.missing_partition(exc):
                await make_room()
            elif number > 1:
                await anyio.sleep(database.backoff(number - 1, first=0.02, cap=1.0))
    raise AssertionError("unreachable")

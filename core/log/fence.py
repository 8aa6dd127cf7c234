"""The visibility fence, and what holds it back.

Readers of the global log see only rows of transactions older than every transaction still
running (see `reader`): a transaction left open anywhere on the server holds every consumer
at the fence. `status()` says how many events wait behind it and which sessions hold it.
"""

from __future__ import annotations

import dataclasses

import asyncpg

from props.core.log.checkpoints import Checkpoint
from props.core.log.sql import shaped
from props.schema import queries


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
class _Head:
    last_tx: int | None
    last_position: int | None
    held_back: int
    fence: int


_HEAD = queries.typed("events", "head", _Head)
_BLOCKERS = queries.typed("events", "fence_blockers", FenceBlocker)


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


async def status(pool: asyncpg.Pool, max_blockers: int = 5) -> FenceStatus:
    """Where the fence stands, and the running transactions (up to `max_blockers`) that
    hold it."""
    async with pool.acquire() as conn:
        head = shaped(_HEAD, await conn.fetch(_HEAD.text))[0]  # always one row
        blockers: list[FenceBlocker] = []
        if head.held_back:
            blockers = shaped(_BLOCKERS, await conn.fetch(_BLOCKERS.text, max_blockers))
    last = None
    if head.last_tx is not None and head.last_position is not None:
        last = Checkpoint(head.last_tx, head.last_position)
    return FenceStatus(head.fence, last, head.held_back, blockers)

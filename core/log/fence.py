"""The visibility fence, and what holds it back.

Readers of the global log see only rows of transactions older than every transaction still
running (see `reader`): a transaction left open anywhere on the server holds every consumer
at the fence. `status()` says how many events wait behind it and which sessions hold it.
"""

from __future__ import annotations

import dataclasses

import asyncpg

from props.core.log.checkpoints import Checkpoint
from props.schema import queries

_Q = queries.load("events")


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


async def status(pool: asyncpg.Pool, max_blockers: int = 5) -> FenceStatus:
    """Where the fence stands, and the running transactions (up to `max_blockers`) that
    hold it."""
    async with pool.acquire() as conn:
        row = await conn.fetchrow(_Q["head"])
        assert row is not None  # scalar subqueries: always one row
        blockers: list[FenceBlocker] = []
        if row["held_back"]:
            blockers = [
                FenceBlocker(r["pid"], r["datname"], r["usename"], r["application_name"],
                             r["state"], r["age_seconds"] or 0.0, r["xid"])
                for r in await conn.fetch(_Q["fence_blockers"], max_blockers)
            ]
    last = None
    if row["last_tx"] is not None:
        last = Checkpoint(row["last_tx"], row["last_position"])
    return FenceStatus(row["fence"], last, row["held_back"], blockers)

"""Checkpoints: where each consumer of the log stands, with one owner of every write.

A consumer (projection runner, reactor, subscription) moves its own checkpoint by
compare-and-set, in the transaction that writes its effects; a rebuild that swaps tables sets
the swapped projections' checkpoints outright and forgets its shadow ones. Both go through
here: nothing else writes `props.checkpoints`.
"""

from __future__ import annotations

import dataclasses

import asyncpg

from props.core.log import database, errors
from props.schema import queries

_Q = queries.load("events")


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


class Checkpoints:
    """The checkpoints of one database: `store.checkpoints`."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def find(self, name: str) -> Checkpoint | None:
        """Checkpoint `name`, or None if no consumer of that name ever saved one."""
        row = await self.pool.fetchrow(_Q["load_checkpoint"], name)
        return None if row is None else Checkpoint(row["tx_id"], row["position"])

    async def load(self, name: str) -> Checkpoint:
        """Checkpoint `name`, or START: where a consumer of that name resumes."""
        return await self.find(name) or START

    async def save(
        self,
        name: str,
        expected: Checkpoint,
        new: Checkpoint,
        *,
        conn: database.Connection | None = None,
    ) -> None:
        """Move checkpoint `name` from `expected` to `new` (compare-and-set).

        Pass the connection of the transaction that writes the consumer's effects, so rows
        and checkpoint commit together. `CheckpointConflict` if another consumer moved it.
        """
        target: asyncpg.Pool | database.Connection = conn if conn is not None else self.pool
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

    @staticmethod
    async def overwrite(conn: database.Connection, name: str, at: Checkpoint) -> None:
        """Set checkpoint `name` to `at` whatever it was: a rebuild's swap, which holds the
        live tables exclusively in `conn`'s transaction, so no consumer moves it meanwhile."""
        await conn.execute(_Q["overwrite_checkpoint"], name, at.tx_id, at.position)

    @staticmethod
    async def forget(conn: database.Connection, prefix: str) -> None:
        """Delete every checkpoint whose name starts with `prefix` (a rebuild's shadows)."""
        await conn.execute(_Q["forget_checkpoints"], prefix)

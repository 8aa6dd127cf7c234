"""Projections as of a point in the log: `props report --as-of POSITION|TIME`.

A number quoted months ago must come back exactly: the report's tables are folded again from
the events up to that point, by the same folds as the live projections (so rebuild ==
incremental makes them the rows the live tables held then), into the session's temporary
schema. Nothing is written to the database's own tables, nothing is left behind (temporary
tables go with the session), and the live projections are not touched.
"""

from __future__ import annotations

import datetime as dt

from props.core.log import database, errors
from props.core.log.checkpoints import START, Checkpoint
from props.core.log.store import EventStore
from props.projections import engine, folding, parking, tables, views
from props.schema import queries

_Q = queries.load("as_of")
SCHEMA = "pg_temp"  # the session's own: gone when the session ends, whatever happens


async def resolve(conn: database.Connection, text: str) -> Checkpoint:
    """The point `text` names: TX:POSITION (a checkpoint, as `props projections status` and
    every report print it), a global position, or an ISO 8601 time (the last event recorded
    at or before it). Only events behind the visibility fence can be named."""
    text = text.strip()
    if text.count(":") == 1 and text.replace(":", "").isdigit():
        cp = Checkpoint.parse(text)
        row = await conn.fetchrow(_Q["at_checkpoint"], cp.tx_id, cp.position)
        what = f"checkpoint {text}"
    elif text.isdigit():
        row = await conn.fetchrow(_Q["at_position"], int(text))
        what = f"position {text}"
    else:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise errors.UnknownLogPoint(
                f"--as-of {text!r} is not TX:POSITION, a global position or an ISO 8601 time "
                "(e.g. 2026-11-30T12:00:00+00:00)") from None
        if when.tzinfo is None:
            raise errors.UnknownLogPoint(f"--as-of {text!r}: give the time's zone (e.g. +00:00 "
                                    "or Z), or the point is not the same for everyone")
        row = await conn.fetchrow(_Q["at_time"], when)
        if row is None:
            raise errors.UnknownLogPoint(f"--as-of {text}: the log holds no event recorded "
                                    "at or before that time")
        return Checkpoint(row["tx_id"], row["global_position"])
    if row is None:
        raise errors.UnknownLogPoint(f"--as-of {what}: no such event behind the visibility fence "
                                "(see `props events tail` or `props projections status`)")
    return Checkpoint(row["tx_id"], row["global_position"])


async def build(conn: database.Connection, store: EventStore, until: Checkpoint,
                progress: engine.Progress | None = None) -> int:
    """Fold every projection from the start of the log up to `until` into the temporary
    schema of `conn`'s session, with their views; returns how many events were folded.
    `until` must be behind the fence (see `resolve`)."""
    left = int(await conn.fetchval(_Q["events_up_to"], until.tx_id, until.position))
    async with conn.transaction():
        await tables.create(conn, SCHEMA, [t for p in engine.ALL for t in p.tables])
    positions = {p.name: START for p in engine.ALL}
    skipped = await parking.skips(store, engine.ALL)  # (as parked now)
    after, folded = START, 0
    # The chunks end exactly at `until`: the read order up to it holds `left` events, and no
    # event can come before it any more (it is behind the fence).
    while left > 0:
        chunk = await folding.chunk_after(conn, store, engine.ALL, after,
                                         min(left, engine.REBUILD_CHUNK))
        if chunk is None:
            break
        async with conn.transaction():
            await folding.fold_settings(conn)
            await folding.commit_range(conn, store, SCHEMA, engine.ALL, chunk.python, positions,
                                       chunk.end, None, derive=False, skips=skipped)
        positions = dict.fromkeys(positions, chunk.end)
        after, left, folded = chunk.end, left - chunk.size, folded + chunk.size
        if progress:
            progress(chunk.size)
    if after != until:
        raise AssertionError(f"the fold stopped at {after}, not at {until}")
    async with conn.transaction():
        await folding.fold_settings(conn)
        await folding.derive_all(conn, SCHEMA, engine.ALL)
    await views.create(conn, SCHEMA)
    return folded

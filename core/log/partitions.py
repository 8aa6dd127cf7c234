"""The log's partitions: made on demand as it grows, their planner statistics kept fresh.

`props.events` is partitioned by position range (schema/migrations/0005); a partition is made
when an insert first needs it (`ensure`, called by the append paths' retry policy), never in
advance. Archival (props.core.domain.archive.archival) detaches and drops old ones.
"""

from __future__ import annotations

import contextlib

import asyncpg

from props.schema import queries

_Q = queries.load("events")


async def ensure(pool: asyncpg.Pool, room: int = 0) -> int:
    """Make the log's partitions reach past the next position (and `room` more); the
    append paths call it when an insert finds no partition, then retry."""
    made: int = await pool.fetchval(_Q["ensure_partitions"], room)
    return made


async def analyze_stale(pool: asyncpg.Pool) -> list[str]:
    """ANALYZE the log's partitions whose planner statistics lag far behind their rows.

    Right after a bulk load (an import, a generated log) and before the autovacuum
    daemon comes by, the planner guesses a type filter keeps 5% of the rows instead of
    70% and reads every page of a catch-up by bitmap scan and sort: 150 ms a page instead
    of 1 ms (measured on a rebuild of 190,000 events). Filtered catch-ups (`iter_all`
    with types or a category) call this first: Postgres's advice after a bulk load,
    taken when a read needs it rather than by every writer."""
    names = [r[0] for r in await pool.fetch(_Q["stale_partitions"])]
    for name in names:  # quoted by the server (format %I)
        # A partition another ANALYZE or a VACUUM holds is being seen to: not waited for.
        with contextlib.suppress(asyncpg.LockNotAvailableError):
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '200ms'")
                await conn.execute(f"ANALYZE {name}")
    return names

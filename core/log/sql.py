"""SQL on the log's database for the layers above: their one door to the pool.

The domain, scoring, projections, reactors and tools run their statements through
`store.sql`, so a refusal of the log's own (PX001: a change to the append-only log or a side
table) reaches them as props' exception by name (`errors.translate`), whichever module ran
it. The benchmarks' raw side is the exception: it measures the pool itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from props.core.log import database, errors


class Sql:
    """Statements on the store's pool (`store.sql.fetch(...)`, ...), the same calls as
    asyncpg's, with the log's refusals translated."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        with errors.translated():
            rows: list[asyncpg.Record] = await self._pool.fetch(query, *args)
            return rows

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        with errors.translated():
            row: asyncpg.Record | None = await self._pool.fetchrow(query, *args)
            return row

    async def fetchval(self, query: str, *args: Any) -> Any:
        with errors.translated():
            return await self._pool.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        with errors.translated():
            done: str = await self._pool.execute(query, *args)
            return done

    async def copy_records_to_table(self, table: str, *, records: Iterable[Sequence[Any]],
                                    columns: Sequence[str] | None = None,
                                    schema_name: str | None = None) -> str:
        with errors.translated():
            done: str = await self._pool.copy_records_to_table(
                table, records=records, columns=columns, schema_name=schema_name)
            return done

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[database.Connection]:
        """A connection of the pool for the block (a transaction, several statements)."""
        with errors.translated():
            async with self._pool.acquire() as conn:
                yield conn

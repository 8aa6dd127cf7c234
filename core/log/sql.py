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
from props.schema.queries import Row, Typed


def shaped(statement: Typed[Row], records: Iterable[asyncpg.Record]) -> list[Row]:
    """`records` (rows of `statement`) as its shape; SchemaError when there are more columns
    than fields, or too few. Built by position (kwargs cost 60% more per row on an export):
    that the columns are the fields, in order, is what the schema test holds."""
    try:
        return [statement.shape(*record) for record in records]
    except TypeError as exc:
        raise errors.SchemaError(
            f"the rows of {statement.file}.{statement.name} are not of shape "
            f"{statement.shape.__name__}: {exc}") from exc


class Sql:
    """Statements on the store's pool (`store.sql.fetch(...)`, ...), or inside one
    transaction (`tx.sql`), the same calls as asyncpg's, with the log's refusals translated."""

    def __init__(self, pool: asyncpg.Pool | database.Connection) -> None:
        self._pool = pool

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        with errors.refused():
            rows: list[asyncpg.Record] = await self._pool.fetch(query, *args)
            return rows

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        with errors.refused():
            row: asyncpg.Record | None = await self._pool.fetchrow(query, *args)
            return row

    async def rows(self, statement: Typed[Row], *args: Any) -> list[Row]:
        """The rows of a typed statement, as its shape."""
        return shaped(statement, await self.fetch(statement.text, *args))

    async def row(self, statement: Typed[Row], *args: Any) -> Row | None:
        """The first row of a typed statement, as its shape, or None."""
        found = await self.fetchrow(statement.text, *args)
        return None if found is None else shaped(statement, [found])[0]

    async def fetchval(self, query: str, *args: Any) -> Any:
        with errors.refused():
            return await self._pool.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        with errors.refused():
            done: str = await self._pool.execute(query, *args)
            return done

    async def copy_records_to_table(self, table: str, *, records: Iterable[Sequence[Any]],
                                    columns: Sequence[str] | None = None,
                                    schema_name: str | None = None) -> str:
        with errors.refused():
            done: str = await self._pool.copy_records_to_table(
                table, records=records, columns=columns, schema_name=schema_name)
            return done

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[database.Connection]:
        """A connection of the pool for the block (a transaction, several statements); in a
        transaction's `Sql`, its own connection."""
        with errors.refused():
            if not isinstance(self._pool, asyncpg.Pool):
                yield self._pool
                return
            async with self._pool.acquire() as conn:
                yield conn

"""Projection tables as data: columns with merge rules, their DDL, and the writer of
Python folds.

Row maps (rows.py) fold on the server with each column's merge rule. A Python fold folds
events into a `Delta` (rows keyed by primary key, partial: a column left None is "not changed
by these events", but for `latest`), and `write` merges the delta into the tables: COPY into
a temporary staging table, then one INSERT ... ON CONFLICT per table, with the same rules.
The same code runs for a batch of the live runner and for a chunk of a rebuild, so both
paths give the same rows by construction.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any, Literal

from props.core.log import database

Merge = Literal["key", "set", "latest", "first", "add"]
# Each merge rule in SQL, twice: over all of a key's rows of a range in log order (a window
# `w`, see rows.fold_sql), and between a stored row (t) and the row of newer events (EXCLUDED).
MERGE_SQL: dict[str, tuple[str, str]] = {
    "set": ("projections.newest({column}) OVER w", "COALESCE(EXCLUDED.{column}, t.{column})"),
    "latest": ("last_value({column}) OVER w", "EXCLUDED.{column}"),
    "first": ("projections.oldest({column}) OVER w", "COALESCE(t.{column}, EXCLUDED.{column})"),
    "add": ("(sum({column}) OVER w)::{type}",
            "COALESCE(t.{column}, 0) + COALESCE(EXCLUDED.{column}, 0)"),
}
# props' projection schemas, and the session's temporary one (projections as of a point).
_SCHEMA_NAME = re.compile(r"^(projections(_[a-z0-9_]+)?|pg_temp)$")


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str
    # set: the newest non-null value wins; latest: the newest value, null included (a row
    # replaced whole by each event); first: the oldest non-null value wins; add: sum
    merge: Merge = "set"

    @property
    def sql_type(self) -> str:
        """The column's SQL type; text keys compare by code point (COLLATE "C"): the same
        order whatever the database's locale, and index upkeep without its string compare."""
        return f'{self.type} COLLATE "C"' if self.merge == "key" and self.type == "text" \
            else self.type


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    keys: tuple[str, ...] = dataclasses.field(init=False)
    names: tuple[str, ...] = dataclasses.field(init=False)
    merges: dict[str, Merge] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Read on every row a fold puts: computed once.
        object.__setattr__(self, "keys", tuple(c.name for c in self.columns if c.merge == "key"))
        object.__setattr__(self, "names", tuple(c.name for c in self.columns))
        object.__setattr__(self, "merges", {c.name: c.merge for c in self.columns})

    def ddl(self, schema: str) -> str:
        cols = ",\n    ".join(
            f"{c.name} {c.sql_type}" + (" NOT NULL" if c.merge == "key" else "")
            for c in self.columns
        )
        target = f"{check_schema(schema)}.{self.name}"
        # No planner statistics of JSON documents (nobody filters on them, and computing
        # them was 90% of analyzing reported_issues after a rebuild: 161 ms of 175).
        unmeasured = "".join(f"; ALTER TABLE {target} ALTER COLUMN {c.name} SET STATISTICS 0"
                             for c in self.columns if c.type == "jsonb")
        return (f"CREATE TABLE {target} (\n    {cols},\n"
                f"    PRIMARY KEY ({', '.join(self.keys)})\n){unmeasured}")

    def merge_sql(self, schema: str, staging: str) -> str:
        target = f"{check_schema(schema)}.{self.name}"
        updates = [f"{c.name} = {MERGE_SQL[c.merge][1].format(column=c.name)}"
                   for c in self.columns if c.merge != "key"]
        action = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
        cols = ", ".join(self.names)
        return (f"INSERT INTO {target} AS t ({cols}) SELECT {cols} FROM {staging} "
                f"ON CONFLICT ({', '.join(self.keys)}) {action}")


def check_schema(name: str) -> str:
    """Schema names are spliced into DDL: only props' own projection schemas pass."""
    if not _SCHEMA_NAME.match(name):
        raise ValueError(f"not a projection schema name: {name!r}")
    return name


class Delta:
    """Row changes of one batch, merged per key with each column's rule."""

    def __init__(self, tables: Iterable[Table]) -> None:
        self.tables = {t.name: t for t in tables}
        self.rows: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
            name: {} for name in self.tables
        }

    def put(self, table: str, **values: Any) -> None:
        spec = self.tables[table]
        key = tuple(values[k] for k in spec.keys)
        row = self.rows[table].get(key)
        if row is None:
            self.rows[table][key] = {k: v for k, v in values.items() if v is not None}
            return
        merges = spec.merges
        for name, value in values.items():  # only the columns given: a fold gives few
            merge = merges[name]
            if merge == "latest":
                row[name] = value
            elif value is None:
                continue
            elif merge == "set":
                row[name] = value
            elif merge == "first":
                row.setdefault(name, value)
            elif merge == "add":
                row[name] = row.get(name, 0) + value


async def create(conn: database.Connection, schema: str, tables: Iterable[Table]) -> None:
    for table in tables:
        await conn.execute(table.ddl(schema))


async def write(conn: database.Connection, schema: str, delta: Delta) -> None:
    """Merge `delta` into the tables of `schema`, inside the caller's transaction."""
    for name, rows in delta.rows.items():
        if not rows:
            continue
        table = delta.tables[name]
        staging = f"stage_{name}"
        await conn.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {staging} "
            f"(LIKE {check_schema(schema)}.{name}) ON COMMIT DELETE ROWS"
        )
        names = table.names
        records = [tuple([row.get(c) for c in names]) for row in rows.values()]
        await conn.copy_records_to_table(staging, records=records, columns=list(names))
        await conn.execute(table.merge_sql(schema, staging))
        await conn.execute(f"TRUNCATE {staging}")

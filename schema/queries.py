"""Named SQL blocks kept in `.sql` files in `schema/sql/`.

A file holds blocks introduced by a line `-- name --`; `load("events")` returns them by name.
SQL stays in SQL files (readable, greppable, checked by the tests that run it), and no
statement is ever assembled from user-supplied strings.

A statement whose rows the code reads by column is declared with the shape of its rows:
`typed("tokens", "list", Token)` (a dataclass whose first fields are the columns, in order;
fields after them have defaults), run by `store.sql.rows(...)`/`row(...)`, which give
`Token`s. An unknown name fails at import; a test prepares every typed statement against
the schema and holds its columns to the shape's fields.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources
from typing import Any, Generic, TypeVar

_HEADER = re.compile(r"^-- ([a-z_][a-z0-9_]*) --$", re.MULTILINE)


@functools.cache
def load(name: str) -> dict[str, str]:
    text = resources.files("props.schema").joinpath("sql", f"{name}.sql").read_text()
    parts = _HEADER.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    blocks = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}
    if not blocks:
        raise ValueError(f"no named blocks in sql/{name}.sql")
    return blocks


Row = TypeVar("Row")


@dataclasses.dataclass(frozen=True)
class Typed(Generic[Row]):
    """A named statement and the shape of the rows it returns."""

    file: str
    name: str
    text: str
    shape: type[Row]


TYPED: list[Typed[Any]] = []  # every typed statement declared (for the schema test)


def typed(file: str, name: str, shape: type[Row]) -> Typed[Row]:
    """Statement `name` of `sql/{file}.sql`, whose rows are `shape`s."""
    blocks = load(file)
    if name not in blocks:
        raise ValueError(f"no statement {name!r} in sql/{file}.sql")
    if not dataclasses.is_dataclass(shape):
        raise TypeError(f"the rows of {file}.{name} need a dataclass, not {shape!r}")
    statement: Typed[Row] = Typed(file, name, blocks[name], shape)
    TYPED.append(statement)
    return statement

"""Named SQL blocks kept in `.sql` files in `schema/sql/`.

A file holds blocks introduced by a line `-- name --`; `load("events")` returns them by name.
SQL stays in SQL files (readable, greppable, checked by the tests that run it), and no
statement is ever assembled from user-supplied strings.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

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

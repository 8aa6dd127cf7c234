"""How props prints: stored and user-supplied text is text, never markup, never terminal
control.

Everything the CLI prints goes through these classes. Rich reads `[...]` as markup by
default: a critic's own tag `[swallowed-exception]` vanished, and a model named `[/x]gpt`
made every later `props report` crash (the log keeps it forever). So markup is off, and
characters that would act on the terminal instead of showing (C0 and C1 controls such as
ESC, bidirectional overrides that reorder what follows) are shown as escapes (`\\x1b`,
`\\u202e`): what an agent wrote is seen, never obeyed. Line breaks and tabs stay.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import rich.console
import rich.table
import rich.text

_ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: str) -> str:
    """`text` with every character that would act on a terminal shown as an escape."""
    return _ACTIVE.sub(_escape, text)


def _shown(value: Any) -> Any:
    if isinstance(value, str):
        return safe(value)
    if isinstance(value, rich.text.Text):
        shown = value.copy()
        shown.plain = safe(value.plain)
        return shown
    return value


class Console(rich.console.Console):
    """rich's Console without markup, emoji codes or highlighting, whose strings are made
    safe (`safe`) as they are printed."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("highlight", False)
        super().__init__(markup=False, emoji=False, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(_shown(o) for o in objects), **kwargs)

    def on_broken_pipe(self) -> None:
        # rich exits 1 here; `props ... | head` is not a failure of props: the CLI ends it
        # as any program whose reader went away (see cli).
        self.quiet = True
        raise BrokenPipeError


class Table(rich.table.Table):
    """rich's Table whose cells are text, made safe, and never cut: a cell too wide for
    its column folds onto more lines (an id or a model's name cut to `refer…` cannot be told
    from its neighbour, nor pasted into the next command)."""

    def __init__(self, *headers: Any, **kwargs: Any) -> None:
        super().__init__(*headers, **kwargs)
        for column in self.columns:
            column.overflow = "fold"

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(_shown(r) for r in renderables), **kwargs)


# -- one output convention for lists ------------------------------------------------------------

Cell = Callable[[Any], str]


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def emit(fmt: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]],
         *, empty: str, cells: Mapping[str, Cell] | None = None) -> None:
    """Print `rows` as a table (`columns`: key and header; `cells` format a key's values for
    people), a JSON array of objects, or CSV. An empty table says `empty` instead."""
    keys = [key for key, _header in columns]
    if fmt == "json":
        print(orjson.dumps([{k: _plain(r[k]) for k in keys} for r in rows]).decode())
    elif fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(keys)
        writer.writerows([[_csv(r[k]) for k in keys] for r in rows])
        print(out.getvalue(), end="")
    elif not rows:
        Console().print(empty)
    else:
        shown = cells or {}
        table = Table(*(header for _key, header in columns))
        for r in rows:
            table.add_row(*((shown[k] if k in shown else _cell)(r[k]) for k in keys))
        Console().print(table)


def _csv(value: Any) -> Any:
    """A CSV field: lists and objects as JSON text (never Python's repr)."""
    return orjson.dumps(value).decode() if isinstance(value, list | dict) else _plain(value)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return f"{value:%Y-%m-%d %H:%M:%S}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)

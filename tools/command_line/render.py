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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
import rich.box
import rich.cells
import rich.console
import rich.table
import rich.text
from rich.text import Text

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


# -- tables that fit the terminal ---------------------------------------------------------------

Cell = Callable[[Any], str]


@dataclass(frozen=True)
class Column:
    """One column of a listing: the row's `key`, its `header`, how a value shows (`cell`;
    or `shows`, from the whole row, for a cell made of several values), a `short` header for
    narrow terminals (explained under the table), whether it may be left out when the table
    does not fit (`optional`: the footer names it), and whether its cells are prose that may
    wrap between words (every other cell stays on one line)."""

    key: str
    header: str
    cell: Cell | None = None
    short: str | None = None
    optional: bool = False
    prose: bool = False
    justify: Literal["left", "right"] = "left"
    shows: Callable[[Mapping[str, Any]], str] | None = None

    def text(self, row: Mapping[str, Any]) -> str:
        return self.shows(row) if self.shows else (self.cell or _cell)(row[self.key])


def _width(text: str) -> int:
    return max((rich.cells.cell_len(line) for line in text.split("\n")), default=0)


# Prose wraps between words; a "word" longer than this (a digest, a JSON string without a
# space) is folded rather than given a column of its own width.
PROSE_WORD = 30


def _longest_word(text: str) -> int:
    return min(PROSE_WORD, max((rich.cells.cell_len(w) for w in text.split()), default=0))


GAP = 2  # spaces between two columns


@dataclass
class Fitted:
    """What fits a terminal: the columns shown with the header each shows, the columns
    left out, and the short headers used; `records` when not even the kept columns fit
    side by side (then each row prints as `header: value` lines)."""

    columns: list[tuple[int, str, int]]  # a column's index, the header shown, its width
    left_out: list[Column]
    legend: list[tuple[str, str]]
    records: bool = False


def _empty(text: str) -> bool:
    return not text.strip()


def fit(columns: Sequence[Column], cells: Sequence[Sequence[str]], width: int | None,
        ) -> Fitted:
    """The columns that fit in `width` (None: all, unsqueezed), each at a width none of its
    words, numbers or names is split at. In order: every column with its header; columns
    with nothing in any row left out (nothing is lost); the short headers; optional columns
    left out, the last first; prose wrapped at its longest word, then folded down to
    PROSE_FLOOR; then records. Prose columns share what is left evenly."""
    def natural(i: int, header: str) -> int:
        return max([_width(header)] + [_width(row[i]) for row in cells])

    def least(i: int, header: str, floor: int | None = None) -> int:
        c = columns[i]
        if not c.prose:
            return natural(i, header)
        word = max([_longest_word(header)] + [_longest_word(row[i]) for row in cells])
        return word if floor is None else min(word, floor)

    def total(widths: list[int]) -> int:
        return sum(widths) + GAP * (len(widths) - 1)

    every = list(range(len(columns)))
    full = [(i, columns[i].header, natural(i, columns[i].header)) for i in every]
    if width is None:
        return Fitted(full, [], [])
    shown = [i for i in every if cells and not all(_empty(row[i]) for row in cells)] or every
    if total([natural(i, columns[i].header) for i in shown]) <= width:
        return Fitted([f for f in full if f[0] in shown], [], [])
    headers = [c.short or c.header for c in columns]
    legend = [(c.short, c.header) for c in columns if c.short]
    while True:  # every cell whole, leaving out optional columns, the last first
        widths = [natural(i, headers[i]) for i in shown]
        optional = [i for i in shown if columns[i].optional]
        if total(widths) <= width or not optional:
            break
        shown.remove(optional[-1])
    # Then prose wraps between its words (down to its longest word, then folded down to
    # PROSE_FLOOR), sharing what the kept columns leave: an optional column never takes the
    # width a key column's prose needs.
    for floor in (None, PROSE_FLOOR):
        widths = [least(i, headers[i], floor) for i in shown]
        if total(widths) <= width:
            grown = _share(width - total(widths), [
                natural(i, headers[i]) - w if columns[i].prose else 0
                for i, w in zip(shown, widths, strict=True)])
            out = [(i, headers[i], w + g) for i, w, g in zip(shown, widths, grown, strict=True)]
            dropped = [c for i, c in enumerate(columns) if i not in shown
                       and not all(_empty(row[i]) for row in cells)]
            return Fitted(out, dropped, [(s, h) for s, h in legend
                                         if any(columns[i].short == s for i, *_ in out)])
    return Fitted(full, [], [], records=True)


PROSE_FLOOR = 12  # the narrowest a prose column folds to before the table becomes records


def _share(spare: int, wants: list[int]) -> list[int]:
    """`spare` columns given out evenly, one at a time, to those that want more."""
    got = [0] * len(wants)
    while spare > 0 and any(g < w for g, w in zip(got, wants, strict=True)):
        for k, w in enumerate(wants):
            if spare and got[k] < w:
                got[k] += 1
                spare -= 1
    return got


def print_table(console: rich.console.Console, columns: Sequence[Column],
                rows: Sequence[Mapping[str, Any]], *, wide: bool = False,
                title: str | None = None) -> None:
    """`rows` as a table that fits the console (every column with `wide`, however wide),
    then a line naming the short headers and one naming the columns left out."""
    cells = [[c.text(r) for c in columns] for r in rows]
    fitted = fit(columns, cells, None if wide else console.width)
    if fitted.records:
        if title:
            console.print(Text(title))
        for n, row in enumerate(cells):
            console.print(Text(("\n" if n else "") + "\n".join(
                f"{c.header}: {text}" for c, text in zip(columns, row, strict=True))))
        return
    # gh's and kubectl's layout: a rule under the headers, two spaces between columns, no
    # borders (they took 3 columns per column of an 80-column terminal).
    table = Table(title=title, box=rich.box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True, title_justify="left")
    for i, header, w in fitted.columns:
        table.add_column(header, justify=columns[i].justify, no_wrap=not columns[i].prose,
                         min_width=w, max_width=w, overflow="fold")
    for row in cells:
        table.add_row(*(row[i] for i, *_ in fitted.columns))
    if wide:  # the table as wide as it is, whatever the terminal
        console.width = max(console.width, sum(w for *_, w in fitted.columns)
                            + GAP * (len(fitted.columns) - 1))
    console.print(table)
    if fitted.legend:
        console.print(Text("; ".join(f"{s}: {h}" for s, h in fitted.legend)))
    if fitted.left_out:
        console.print(Text(f"not shown at {console.width} columns: "
                           f"{', '.join(c.header for c in fitted.left_out)} (--wide, or "
                           f"--format csv or json)"))


# -- one output convention for lists ------------------------------------------------------------


def plain(value: Any) -> Any:
    """A value as JSON holds it: times in ISO 8601, ids as text."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def columns_of(columns: Sequence[tuple[str, str] | Column],
               cells: Mapping[str, Cell] | None = None) -> list[Column]:
    shown = cells or {}
    return [c if isinstance(c, Column) else Column(c[0], c[1], shown.get(c[0]))
            for c in columns]


class Output(Protocol):
    """What a command's `--format` and `--wide` chose (its parsed arguments)."""

    format: str
    wide: bool


def emit(chosen: Output, rows: Sequence[Mapping[str, Any]],
         columns: Sequence[tuple[str, str] | Column], *, empty: str,
         cells: Mapping[str, Cell] | None = None, title: str | None = None) -> None:
    """Print `rows` as `chosen` asks: a table that fits the terminal (`columns`: key and
    header, or `Column`s; `cells` format a key's values for people), a JSON array of
    objects, or CSV. An empty table says `empty` instead."""
    spec = columns_of(columns, cells)
    # Programs get every value of the rows; the table shows what fits (it may merge or
    # leave out columns).
    keys = list(rows[0]) if rows else [c.key for c in spec]
    fmt = chosen.format
    if fmt == "json":
        print(orjson.dumps([{k: plain(r[k]) for k in keys} for r in rows]).decode())
    elif fmt == "csv":
        print_csv(keys, ([r[k] for k in keys] for r in rows))
    elif not rows:
        Console().print(empty)
    else:
        print_table(Console(), spec, rows, wide=chosen.wide, title=title)


def print_csv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Rows as CSV on stdout, every field made safe for a spreadsheet (`csv_field`)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows([csv_field(v) for v in row] for row in rows)
    print(out.getvalue(), end="")


# A text field a spreadsheet would run as a formula (=HYPERLINK(...), +, -, @, or a tab or a
# carriage return before one): a model name or a rationale is anyone's text.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_field(value: Any) -> Any:
    """A CSV field: lists and objects as JSON text (never Python's repr); text that a
    spreadsheet would take for a formula behind a quote (OWASP's neutralization), numbers
    as they are."""
    if isinstance(value, list | dict):
        value = orjson.dumps(value).decode()
    value = plain(value)
    if isinstance(value, str) and value.startswith(_FORMULA):
        try:
            float(value)
        except ValueError:
            return "'" + value
    return value


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return f"{value:%Y-%m-%d %H:%M:%S}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list | dict):
        return orjson.dumps(value).decode()
    return str(value)

"""What a projection is: a name, a version, its tables, and how events become rows: row maps
folded on the server (one row per event, see rows.py), Python folds for the rest."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from props.core.log.events import RecordedEvent
from props.projections.rows import RowMap
from props.projections.tables import Delta, Table

Fold = Callable[[Delta, RecordedEvent], None]


@dataclasses.dataclass(frozen=True)
class Derived:
    """A table of the projection kept from another of its tables, run by run: after each
    folded range, the rows of every run (and scorer) that the range's events of `source`
    name are made again from all of that run's `source` rows (of that scorer). The same rows
    whatever the ranges, so a rebuild and the live runner agree by construction; a rebuild
    makes them all at once when its folds are done (`count_all`: one pass; counted chunk
    by chunk, the quick rebuild bench lost 15%). The SQL names the projection schema
    `{schema}`."""

    table: Table
    source: Table
    # the runs and scorers (a null scorer: all of the run's) named by the events of the types
    # $5 in the range ($1, $2] .. ($3, $4]
    touched: str
    forget: str  # delete the rows of the runs $1 by the scorer $2, $3 (null: every scorer)
    count: str  # insert the rows of the runs $1 by the scorer $2, $3 (null: every scorer)
    count_all: str  # insert the rows of every run


@dataclasses.dataclass(frozen=True)
class Projection:
    """Rows derived from events. Raise `version` whenever `tables`, `rows` or `folds`
    change: the runner then rebuilds it from the log before serving it."""

    name: str
    version: int
    tables: tuple[Table, ...]
    rows: tuple[RowMap, ...] = ()  # folded by the server
    folds: dict[str, Fold] = dataclasses.field(default_factory=dict)  # event type -> Python
    derived: tuple[Derived, ...] = ()  # kept from the other tables, after each range

    def __post_init__(self) -> None:
        both = {m.type_name for m in self.rows} & set(self.folds)
        if both:  # one way into the rows per type
            raise ValueError(f"{self.name}: {sorted(both)} both row-mapped and folded")
        if any(d.table not in self.tables or d.source not in self.tables for d in self.derived):
            raise ValueError(f"{self.name}: a derived table and its source are its own")

    def maps_of(self, table: Table) -> tuple[RowMap, ...]:
        return tuple(m for m in self.rows if m.table == table)

    @property
    def checkpoint_name(self) -> str:
        return f"projection:{self.name}@{self.version}"

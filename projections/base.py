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
class Projection:
    """Rows derived from events. Raise `version` whenever `tables`, `rows` or `folds`
    change: the runner then rebuilds it from the log before serving it."""

    name: str
    version: int
    tables: tuple[Table, ...]
    rows: tuple[RowMap, ...] = ()  # folded by the server
    folds: dict[str, Fold] = dataclasses.field(default_factory=dict)  # event type -> Python

    def __post_init__(self) -> None:
        both = {m.type_name for m in self.rows} & set(self.folds)
        if both:  # one way into the rows per type
            raise ValueError(f"{self.name}: {sorted(both)} both row-mapped and folded")

    def maps_of(self, table: Table) -> tuple[RowMap, ...]:
        return tuple(m for m in self.rows if m.table == table)

    @property
    def checkpoint_name(self) -> str:
        return f"projection:{self.name}@{self.version}"

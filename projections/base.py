"""What a projection is: a name, a version, its tables, and a fold from events to rows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from props.core.events import RecordedEvent
from props.projections.tables import Delta, Table

Fold = Callable[[Delta, RecordedEvent], None]


@dataclasses.dataclass(frozen=True)
class Projection:
    """Rows derived from events. Raise `version` whenever `tables` or `fold` change: the
    runner then rebuilds it from the log before serving it."""

    name: str
    version: int
    tables: tuple[Table, ...]
    folds: dict[str, Fold]  # event type -> how it changes the rows

    @property
    def checkpoint_name(self) -> str:
        return f"projection:{self.name}@{self.version}"

    def fold(self, delta: Delta, rec: RecordedEvent) -> None:
        step = self.folds.get(rec.type_name)
        if step is not None:
            step(delta, rec)

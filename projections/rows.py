"""Row maps: projections folded by the database server itself.

Most of the log is events that each give one row of one table (a reported issue, a grade, a
step of a run). A `RowMap` says so declaratively: for events of one type, each column is an
SQL expression over the stored event (`data`, `recorded_at`). From the maps of a table the
engine makes one statement that folds every such event of a range of the log into the table,
on the server: no event crosses the wire, none is validated again, and the rows are merged
with the same rules (`Column.merge`) a Python fold's `Delta` uses:

    set    the newest non-null value in log order wins   (projections.newest)
    latest the newest value, null included               (last_value)
    first  the oldest non-null value wins                (projections.oldest)
    add    values are summed

The live runner and a rebuild run the very same statement, over a batch or a chunk; only the
range differs. Events stored under an older schema version are upcast in Python and staged
(`pg_temp.props_upcast`) in the current shape, so the expressions only ever see current data.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping, Sequence

import pydantic

from props.core.log.events import Event
from props.projections.tables import MERGE_SQL, Table, check_schema

UPCAST_TABLE = "props_upcast"
UPCAST_DDL = (f"CREATE TEMP TABLE IF NOT EXISTS {UPCAST_TABLE} (tx_id xid8, "
              "global_position bigint, type text, data jsonb, metadata jsonb, "
              "stream_id text, recorded_at timestamptz) ON COMMIT DELETE ROWS")
UPCAST_COLUMNS = ("tx_id", "global_position", "type", "data", "metadata", "stream_id",
                  "recorded_at")
# What a map's SQL may read besides `data` and `recorded_at`, read only where a map does.
_EXTRA = ("metadata", "stream_id")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_.]*$")
# ($5: the positions the projection parked, which it skips: see projections.parking)
_RANGE = ("(tx_id, global_position) > ($1::xid8, $2::bigint) "
          "AND (tx_id, global_position) <= ($3::xid8, $4::bigint) "
          "AND global_position <> ALL ($5::bigint[])")


@dataclasses.dataclass(frozen=True)
class Field:
    """A field of the event's data, by path (`field("scorer", "name")`)."""

    path: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Item:
    """A field of each element of the list a row map fans out (`RowMap.each`)."""

    path: tuple[str, ...]


def field(*path: str) -> Field:
    return Field(path)


def item(*path: str) -> Item:
    return Item(path)


# or an SQL expression over `data`, `metadata`, `stream_id`, `recorded_at` and `item`
# (`metadata` is the writer's word, never validated as `data` is: a map reads it only where
# the writer's context is the fact, e.g. which evaluation requested a run)
Source = Field | Item | str


@dataclasses.dataclass(frozen=True, eq=False)  # one of a projection's constants: by identity
class RowMap:
    """Every event of type `event` gives one row of `table` (or, with `each`, one row per
    element of its list field `each`): each column from its source. Columns left out are
    not changed by these events (as a None in a Python fold)."""

    event: type[Event]
    table: Table
    columns: Mapping[str, Source]
    each: str | None = None
    # The category of the streams such events are in (`evaluation`), where there is one:
    # a table whose maps all name theirs reads only those streams' events of a range (by the
    # log's category index), not the whole range, to find a rare type.
    category: str | None = None

    @property
    def item_model(self) -> type[pydantic.BaseModel] | None:
        """The model of the elements of `each` (None without `each`, or if not models)."""
        if self.each is None:
            return None
        listed = self.event.model_fields[self.each].annotation
        inner = typing.get_args(listed)
        if typing.get_origin(listed) is list and isinstance(inner[0], type) \
                and issubclass(inner[0], pydantic.BaseModel):
            return inner[0]
        return None

    def __post_init__(self) -> None:
        if not _TYPE_NAME.match(self.type_name):  # spliced into the statement
            raise ValueError(f"not an event type name: {self.type_name!r}")
        if self.category is not None and not _NAME.match(self.category):
            raise ValueError(f"not a stream category: {self.category!r}")
        if self.each is not None:
            _check_path(self.event, (self.each,))
            if self.item_model is None:
                raise ValueError(f"{self.type_name}.{self.each}: not a list of models")
        unknown = set(self.columns) - set(self.table.names)
        missing = set(self.table.keys) - set(self.columns)
        if unknown or missing:
            raise ValueError(f"{self.type_name} -> {self.table.name}: unknown columns "
                             f"{sorted(unknown)}, keys not given {sorted(missing)}")
        for source in self.columns.values():
            if isinstance(source, Field):
                _check_path(self.event, source.path)
            elif isinstance(source, Item):
                if self.item_model is None:
                    raise ValueError(f"{self.type_name}: item() without each=")
                _check_path(self.item_model, source.path)

    @property
    def type_name(self) -> str:
        return self.event.type_name

    def expression(self, column: str) -> str:
        """The column's value for one event, cast to the column's type."""
        kind = next(c for c in self.table.columns if c.name == column).sql_type
        source = self.columns.get(column)
        if source is None:
            return f"NULL::{kind}"
        if isinstance(source, str):
            return f"({source})::{kind}"
        if isinstance(source, Item):
            model = self.item_model
            assert model is not None
            return f"({_field_sql(model, source.path, json=kind == 'jsonb', base='item')})::{kind}"
        return f"({_field_sql(self.event, source.path, json=kind == 'jsonb')})::{kind}"


def _check_path(model: type[pydantic.BaseModel], path: Sequence[str]) -> None:
    current: object = model
    for step in path:
        fields = getattr(current, "model_fields", None)
        if not _NAME.match(step) or fields is None or step not in fields:
            raise ValueError(f"{model.__name__} has no field {'.'.join(path)}")
        current = _model_of(fields[step].annotation)


def _model_of(annotation: object) -> object:
    """The pydantic model inside an annotation (`X`, `X | None`), or the annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if isinstance(a, type)
                  and issubclass(a, pydantic.BaseModel)]
        return models[0] if models else annotation
    return annotation


def _field_sql(model: type[pydantic.BaseModel], path: Sequence[str], *, json: bool,
               base: str = "data") -> str:
    steps = [f"'{step}'" for step in path]
    sql = base + "".join(f"->{s}" for s in steps[:-1]) + ("->" if json else "->>") + steps[-1]
    # Stored data is a full dump of its model, but data that left out a field with a scalar
    # default (an older writer, an import) still projects as its decoded model would.
    default = model.model_fields[path[0]].default if len(path) == 1 else None
    if json or not isinstance(default, bool | int | float | str):
        return sql
    literal = str(default).lower() if isinstance(default, bool) else str(default)
    return f"COALESCE({sql}, '{literal}')" if "'" not in literal else sql


@functools.lru_cache(maxsize=128)  # the same few statements, every batch of the runner
def fold_sql(schema: str, table: Table, maps: tuple[RowMap, ...],
             versions: tuple[tuple[str, int], ...], upcast: bool) -> str:
    """One statement folding every event of `maps`' types in the range ($1, $2) exclusive to
    ($3, $4) inclusive (tx_id, position), but those at the positions $5, into
    `schema.table`, reading the range once.
    `versions`: (type, current schema version) pairs; with `upcast`, older events are read
    from the upcast staging table (UPCAST_TABLE) too."""
    current_version = dict(versions)
    by_type = {m.type_name: m for m in maps}
    current = " OR ".join(f"(type = '{t}' AND schema_version = {int(current_version[t])})"
                          for t in by_type)
    values = []
    for name in table.names:
        cases = " ".join(f"WHEN '{t}' THEN {m.expression(name)}" for t, m in by_type.items()
                         if name in m.columns)
        values.append(f"CASE type {cases} END AS {name}" if cases else
                      f"{maps[0].expression(name)} AS {name}")  # NULL: no map gives it
    # metadata and stream_id only where a map reads them: the others' statements stay as
    # they were
    meta = "".join(f"{extra}, " for extra in _EXTRA if any(
        isinstance(v, str) and extra in v for m in maps for v in m.columns.values()))
    categories = {m.category for m in maps}
    within = "" if None in categories else \
        f"category IN ({', '.join(sorted(repr(c) for c in categories))}) AND "
    events = (f"SELECT tx_id, global_position, type, data, {meta}recorded_at "
              f"FROM props.events WHERE {within}{_RANGE} AND ({current})")
    if upcast:
        listed = ", ".join(f"'{t}'" for t in by_type)
        events += (f" UNION ALL SELECT tx_id, global_position, type, data, {meta}recorded_at "
                   f"FROM pg_temp.{UPCAST_TABLE} WHERE {_RANGE} AND type IN ({listed})")
    # A map with `each` gives a row per element of that list, numbered in list order; the
    # others one row per event.
    fanned = {t: m.each for t, m in by_type.items() if m.each}
    if not fanned:
        rows = f"SELECT tx_id, global_position, 1 AS nth, {', '.join(values)} FROM ({events}) e"
    else:
        # The list leaves `data` once per event, and the rest of `data` is read from what
        # remains: an event that holds a long list is stored compressed, and every read of
        # a field of the stored value would decompress all of it again, for every element.
        # (OFFSET 0 keeps the planner from substituting the expressions into each use.)
        lists = " ".join(f"WHEN '{t}' THEN data->'{each}'" for t, each in fanned.items())
        cut = " ".join(f"WHEN '{t}' THEN data - '{each}'" for t, each in fanned.items())
        fan_types = ", ".join(f"'{t}'" for t in fanned)
        rows = (f"SELECT tx_id, global_position, elements.nth, {', '.join(values)} FROM ("
                f"SELECT tx_id, global_position, type, {meta}recorded_at, "
                f"CASE type {cut} ELSE data END AS data, CASE type {lists} END AS list "
                f"FROM ({events}) stored OFFSET 0) e "
                "LEFT JOIN LATERAL jsonb_array_elements(e.list) WITH ORDINALITY "
                "AS elements(item, nth) ON true "
                f"WHERE elements.item IS NOT NULL OR type NOT IN ({fan_types})")
    keys = ", ".join(table.keys)
    if all(c.merge in ("key", "latest") for c in table.columns):
        # Each key's newest row, whole: one sort, no window.
        source = (f"SELECT DISTINCT ON ({keys}) {', '.join(table.names)} FROM ({rows}) s "
                  f"ORDER BY {keys}, tx_id DESC, global_position DESC, nth DESC")
        return table.merge_sql(check_schema(schema), f"({source}) folded")
    # One window over each key's events in log order, whole: every merge is computed once
    # per key from one sort of the range (an ordered aggregate per column would sort each
    # key's events once per column: twice as slow before PostgreSQL 16).
    window = (f"PARTITION BY {keys} ORDER BY tx_id, global_position, nth "
              "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING")
    folded = [c.name if c.merge == "key" else
              f"{MERGE_SQL[c.merge][0].format(column=c.name, type=c.type)} AS {c.name}"
              for c in table.columns]
    source = (f"SELECT * FROM (SELECT {', '.join(folded)}, row_number() OVER w AS one_per_key "
              f"FROM ({rows}) s WINDOW w AS ({window})) each WHERE one_per_key = 1")
    return table.merge_sql(check_schema(schema), f"({source}) folded")

"""Folding a range of the log into projection tables: what the runner, a rebuild and the
projections as of a point (as_of) share.

A range, (checkpoint, end], is folded in one transaction that also moves its checkpoint
(compare-and-set): row maps by one statement per table on the server, Python folds through
a `Delta`, and only the events a Python fold needs are decoded in Python.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence

import orjson

from props.core.log import database
from props.core.log.checkpoints import Checkpoint
from props.core.log.events import DecodeFilter, EventRegistry, RecordedEvent, data_of
from props.core.log.store import EventStore
from props.projections.base import Derived, Fold, Projection
from props.projections.names import LIVE
from props.projections.rows import (
    UPCAST_COLUMNS,
    UPCAST_DDL,
    UPCAST_TABLE,
    RowMap,
    fold_sql,
)
from props.projections.tables import Delta, check_schema, write
from props.schema import queries

FOLD_WORK_MEM = "64MB"  # a chunk's fold sorts in memory, not on disk
_ANY_VERSION = 0  # read_between: every schema version of the type
# A deliberately broken build, for the chaos run's negative control only: the live runner
# keeps its position in memory instead of writing the checkpoint with its rows, so a runner
# that restarts or reconnects applies events again.
_BROKEN_FOR_TEST = os.environ.get("PROPS_BREAK_FOR_TEST") == "checkpoint-outside-transaction"

_Q = queries.load("projections")


def _after(rec: RecordedEvent, cp: Checkpoint) -> bool:
    return (rec.tx_id, rec.global_position) > (cp.tx_id, cp.position)


# Positions each projection skips (it parked the events there), by projection name.
Skips = Mapping[str, frozenset[int]]
NO_SKIPS: Skips = {}


def fold(projections: Sequence[Projection], batch: Sequence[RecordedEvent],
         positions: dict[str, Checkpoint], deltas: dict[str, Delta],
         skips: Skips = NO_SKIPS) -> None:
    """Fold each event into each Python fold of a projection that has not seen it yet (nor
    parked it)."""
    steps: dict[str, list[tuple[Checkpoint, Delta, Fold]]] = {}
    for p in projections:
        skipped = skips.get(p.name)
        for type_name, step in p.folds.items():
            if skipped:
                step = _skipping(step, skipped)
            steps.setdefault(type_name, []).append((positions[p.name], deltas[p.name], step))
    newest = max(positions.values())
    for rec in batch:
        todo = steps.get(rec.type_name)
        if todo is None:
            continue
        if _after(rec, newest):  # the usual case: every projection is behind this event
            for _cp, delta, step in todo:
                step(delta, rec)
        else:
            for cp, delta, step in todo:
                if _after(rec, cp):
                    step(delta, rec)


def _skipping(step: Fold, skipped: frozenset[int]) -> Fold:
    def folded(delta: Delta, rec: RecordedEvent) -> None:
        if rec.global_position not in skipped:
            step(delta, rec)

    return folded


async def commit_range(
    conn: database.Connection, store: EventStore, schema: str,
    projections: Sequence[Projection], events: Sequence[RecordedEvent],
    positions: dict[str, Checkpoint], new: Checkpoint,
    names: Callable[[Projection], str] | None, derive: bool = True,
    skips: Skips = NO_SKIPS, types: frozenset[str] | None = None,
) -> None:
    """Fold the range (position, new] of each projection and move its checkpoint (named by
    `names`; None: a scratch build, which keeps none), in the caller's transaction; with
    `derive`, refresh the derived tables' rows the range touched (a build that does not
    calls `derive_all` once its folds are done).
    `events`: the range's events that need Python (those of Python folds, and row-mapped ones
    stored under an older schema version), or all of them. `skips`: the positions each
    projection parked, which it does not fold. `types`: the types of every event of the
    range, when the caller holds them all (the live runner's batch): a table none of whose
    row maps' types is among them is not folded (its statement would find nothing), nor
    are the derived rows of such a table (None: every statement runs)."""
    for p in projections:
        if new <= positions[p.name]:
            continue
        skipped = skips.get(p.name, frozenset())
        if p.folds:
            delta = Delta(p.tables)
            fold([p], events, positions, {p.name: delta}, skips)
            await write(conn, schema, delta)
        await _fold_rows(conn, store, schema, p, positions[p.name], new, events, skipped, types)
        for derived in p.derived if derive else ():
            if _holds(types, p.maps_of(derived.source)):
                await _refresh(conn, schema, p, derived, positions[p.name], new)
        if names is None or (schema == LIVE and _BROKEN_FOR_TEST):
            continue  # (the chaos run's negative control: the checkpoint is never written)
        await store.save_checkpoint(names(p), positions[p.name], new, conn=conn)


async def _fold_rows(conn: database.Connection, store: EventStore, schema: str,
                     p: Projection, after: Checkpoint, new: Checkpoint,
                     events: Sequence[RecordedEvent], skipped: frozenset[int],
                     types: frozenset[str] | None) -> None:
    """Fold the events of `p`'s row maps in (after, new] on the server, in the caller's
    transaction; those stored under an older schema version (among `events`), upcast when
    they were decoded, are staged in their current shape first."""
    if not p.rows:
        return
    versions = _row_versions(store, [p])
    older = [r for r in events if r.schema_version != versions.get(r.type_name, r.schema_version)
             and _after(r, after) and not _after(r, new)]
    if older:  # (the staging table exists only where some were staged)
        await conn.execute(UPCAST_DDL)
        await conn.copy_records_to_table(UPCAST_TABLE, columns=list(UPCAST_COLUMNS), records=[
            (r.tx_id, r.global_position, r.type_name, orjson.dumps(data_of(r.event)).decode(),
             orjson.dumps(r.metadata).decode(), r.stream_id, r.recorded_at) for r in older])
    for table in p.tables:
        maps = p.maps_of(table)
        if maps and _holds(types, maps):
            statement = fold_sql(schema, table, maps, tuple(versions.items()), bool(older))
            await conn.execute(statement, after.tx_id, after.position, new.tx_id, new.position,
                               sorted(skipped))


def _holds(types: frozenset[str] | None, maps: Sequence[RowMap]) -> bool:
    """Whether a range of events of `types` (None: unknown) may hold one of `maps`."""
    return types is None or any(m.type_name in types for m in maps)


async def _refresh(conn: database.Connection, schema: str, p: Projection, derived: Derived,
                   after: Checkpoint, new: Checkpoint) -> None:
    """Make `derived`'s rows of the runs the range (after, new] touched again, from all of
    their source rows (folded just before, in the same transaction)."""
    types = [m.type_name for m in p.maps_of(derived.source)]
    by_scorer: dict[tuple[str | None, int | None], list[object]] = {}
    for run, name, version in await conn.fetch(derived.touched, after.tx_id, after.position,
                                               new.tx_id, new.position, types):
        by_scorer.setdefault((name, version), []).append(run)
    target = check_schema(schema)
    for (name, version), runs in by_scorer.items():  # a batch's grades: one scorer, mostly
        await conn.execute(derived.forget.replace("{schema}", target), runs, name, version)
        await conn.execute(derived.count.replace("{schema}", target), runs, name, version)


async def derive_all(conn: database.Connection, schema: str,
                     projections: Sequence[Projection]) -> None:
    """Make every derived table of `projections` again from all of its source rows."""
    target = check_schema(schema)
    for derived in (d for p in projections for d in p.derived):
        await conn.execute(f"DELETE FROM {target}.{derived.table.name}")
        await conn.execute(derived.count_all.replace("{schema}", target))


async def fold_settings(conn: database.Connection) -> None:
    """For a transaction that folds: sorts in memory, and planned for its own range."""
    await conn.execute(f"SET LOCAL work_mem = '{FOLD_WORK_MEM}'; {database.BULK_SETTINGS}")


def _row_versions(store: EventStore, projections: Sequence[Projection]) -> dict[str, int]:
    """The current schema version of each row-mapped type (what the statements read)."""
    return {m.type_name: store.registry.require(m.type_name).schema_version
            for p in projections for m in p.rows}


def python_wants(store: EventStore, projections: Sequence[Projection]) -> dict[str, int]:
    """The stored events Python must decode, as type -> the one schema version of it that
    it need not (`_ANY_VERSION`: it needs every version): all of a Python fold's types (they
    are few), and row-mapped types stored under an older schema version, to upcast (rarer
    still). The server folds the rest from the log itself."""
    return {**_row_versions(store, projections),
            **dict.fromkeys((t for p in projections for t in p.folds), _ANY_VERSION)}


def decode_filter(wanted: dict[str, int]) -> DecodeFilter:
    def needs(type_name: str, version: int) -> bool:
        skipped = wanted.get(type_name)
        return skipped is not None and skipped != version

    return needs


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A range of the log folded in one transaction: (where the last one ended, end]."""

    end: Checkpoint
    size: int
    python: list[RecordedEvent]  # its events that need Python (see chunk_after)


async def chunk_after(conn: database.Connection, store: EventStore,
                       projections: Sequence[Projection], after: Checkpoint,
                       limit: int) -> Chunk | None:
    """The next chunk of at most `limit` events after `after`, with its events that Python
    needs (`python_wants`), read only when the chunk holds some."""
    row = await conn.fetchrow(_Q["chunk_end"], after.tx_id, after.position, limit)
    if row is None:
        return None
    end = Checkpoint(row["tx_id"], row["global_position"])
    wanted = python_wants(store, projections)
    needs = decode_filter(wanted)
    python: list[RecordedEvent] = []
    if any(needs(t, v) for t, v in zip(row["types"], row["schema_versions"], strict=True)):
        python = store.reader.decode(await conn.fetch(
            _Q["read_between"], after.tx_id, after.position, end.tx_id, end.position,
            list(wanted), list(wanted.values())))
    return Chunk(end, row["events"], python)


# -- the live runner ----------------------------------------------------------------------------



def statements(p: Projection, registry: EventRegistry, schema: str = LIVE) -> str:
    """Every statement `p` runs, as text a person reads (`props projections sql NAME`): its
    tables, the fold of each row-mapped table (parameters: $1, $2 the range's start as
    tx_id and position, exclusive; $3, $4 its end, inclusive; $5 the positions of parked
    events, skipped), and the derived tables' statements. Golden files in the tests hold
    them, so a change to the generated SQL is seen in review."""
    versions = tuple((m.type_name, registry.require(m.type_name).schema_version)
                     for m in p.rows)
    out = [f"-- projection {p.name} (version {p.version})"]
    for table in p.tables:
        out += [f"\n-- table {table.name}", table.ddl(schema) + ";"]
        if maps := p.maps_of(table):
            types = ", ".join(m.type_name for m in maps)
            out += [f"-- fold of {types} into {table.name}",
                    _readable(fold_sql(schema, table, maps, versions, False)) + ";"]
    for d in p.derived:
        for what in ("touched", "forget", "count", "count_all"):
            out += [f"\n-- {d.table.name} from {d.source.name}: {what}",
                    getattr(d, what).replace("{schema}", schema).strip() + ";"]
    if p.folds:
        out.append(f"\n-- folded in Python: {', '.join(sorted(p.folds))}")
    return "\n".join(out) + "\n"


# Where a generated statement breaks onto a new line for a reader (whitespace only: the text
# runs as it is).
_BREAKS = (" FROM (", " WHERE ", " WINDOW ", " ON CONFLICT ", " UNION ALL ", " LEFT JOIN ",
           " ORDER BY ")


def _readable(sql: str) -> str:
    for word in _BREAKS:
        sql = sql.replace(word, "\n " + word)
    return sql.replace(", CASE type ", ",\n    CASE type ").replace(
        ", projections.", ",\n    projections.")

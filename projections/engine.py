"""Keeping projections current (the runner) and rebuilding them beside the live ones.

Both fold a range of the log, (checkpoint, end], into a projection's tables in one
transaction that also moves its checkpoint (compare-and-set): row maps by one statement per
table on the server, Python folds through a `Delta`. So a runner killed at any point resumes
exactly where its last commit left it. The runner's ranges are the batches of its
subscription. A rebuild folds the log into a shadow schema in chunks (each committed with a
shadow checkpoint, so an interrupted rebuild resumes; the projections' chunks in parallel, on
connections of their own), then, in one transaction holding the live tables exclusively,
catches up to the head, swaps the shadow tables in, recreates the views and moves the
checkpoints. Analysts see the old rows until that commit and the new rows after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Sequence

import anyio
import anyio.abc
import asyncpg
import orjson

from props.core.log import database, errors, leadership
from props.core.log.checkpoints import START, Checkpoint, Checkpoints
from props.core.log.events import DecodeFilter, RecordedEvent, data_of
from props.core.log.store import EventStore
from props.projections.base import Fold, Projection
from props.projections.grading import GRADING
from props.projections.ground_truth import GROUND_TRUTH
from props.projections.rows import UPCAST_COLUMNS, UPCAST_DDL, UPCAST_TABLE, fold_sql
from props.projections.runs import EXCLUSIONS, IMPORTS, ISSUES, RUNS, USAGE
from props.projections.tables import Delta, check_schema, create, write
from props.schema import queries

log = logging.getLogger(__name__)

ALL: tuple[Projection, ...] = (GROUND_TRUTH, RUNS, ISSUES, USAGE, GRADING, IMPORTS,
                               EXCLUSIONS)
LIVE = "projections"
SHADOW = "projections_next"
ANALYST_ROLE = database.ANALYST_ROLE  # reads the live projections only
REBUILD_CHUNK = 50_000
_AHEAD = 2  # chunks a projection's rebuild may fold ahead of the slowest one's
FOLD_WORK_MEM = "64MB"  # a chunk's fold sorts in memory, not on disk
SWAP_LOCK_WAIT_MS = 100  # well under deadlock_timeout (1 s): the swap yields first
_ANY_VERSION = 0  # read_between: every schema version of the type

# A deliberately broken build, for the chaos run's negative control only: the live runner
# keeps its position in memory instead of writing the checkpoint with its rows, so a runner
# that restarts or reconnects applies events again.
_BROKEN_FOR_TEST = os.environ.get("PROPS_BREAK_FOR_TEST") == "checkpoint-outside-transaction"

_VIEWS = queries.load("projection_views")
_Q = queries.load("projections")

Progress = Callable[[int], None]


def by_name(names: Sequence[str]) -> tuple[Projection, ...]:
    known = {p.name: p for p in ALL}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise errors.PropsError(
            f"unknown projection(s) {', '.join(unknown)}; known: {', '.join(known)}"
        )
    return tuple(known[n] for n in names)


SHADOW_CHECKPOINT = "rebuild:"  # a rebuild's own checkpoints: rebuild:<projection's>


def _shadow_name(p: Projection) -> str:
    return f"{SHADOW_CHECKPOINT}{p.checkpoint_name}"


def _after(rec: RecordedEvent, cp: Checkpoint) -> bool:
    return (rec.tx_id, rec.global_position) > (cp.tx_id, cp.position)


def fold(projections: Sequence[Projection], batch: Sequence[RecordedEvent],
         positions: dict[str, Checkpoint], deltas: dict[str, Delta]) -> None:
    """Fold each event into each Python fold of a projection that has not seen it yet."""
    steps: dict[str, list[tuple[Checkpoint, Delta, Fold]]] = {}
    for p in projections:
        for type_name, step in p.folds.items():
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


async def commit_range(
    conn: database.Connection, store: EventStore, schema: str,
    projections: Sequence[Projection], events: Sequence[RecordedEvent],
    positions: dict[str, Checkpoint], new: Checkpoint,
    names: Callable[[Projection], str] | None,
) -> None:
    """Fold the range (position, new] of each projection and move its checkpoint (named by
    `names`; None: a scratch build, which keeps none), in the caller's transaction.
    `events`: the range's events that need Python (those of Python folds, and row-mapped ones
    stored under an older schema version), or all of them."""
    for p in projections:
        if new <= positions[p.name]:
            continue
        if p.folds:
            delta = Delta(p.tables)
            fold([p], events, positions, {p.name: delta})
            await write(conn, schema, delta)
        await _fold_rows(conn, store, schema, p, positions[p.name], new, events)
        if names is None or (schema == LIVE and _BROKEN_FOR_TEST):
            continue  # (the chaos run's negative control: the checkpoint is never written)
        await store.save_checkpoint(names(p), positions[p.name], new, conn=conn)


async def _fold_rows(conn: database.Connection, store: EventStore, schema: str,
                     p: Projection, after: Checkpoint, new: Checkpoint,
                     events: Sequence[RecordedEvent]) -> None:
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
             r.recorded_at) for r in older])
    for table in p.tables:
        maps = p.maps_of(table)
        if maps:
            statement = fold_sql(schema, table, maps, tuple(versions.items()), bool(older))
            await conn.execute(statement, after.tx_id, after.position, new.tx_id, new.position)


async def fold_settings(conn: database.Connection) -> None:
    """For a transaction that folds: sorts in memory, and planned for its own range."""
    await conn.execute(f"SET LOCAL work_mem = '{FOLD_WORK_MEM}'; {database.BULK_SETTINGS}")


def _row_versions(store: EventStore, projections: Sequence[Projection]) -> dict[str, int]:
    """The current schema version of each row-mapped type (what the statements read)."""
    return {m.type_name: store.registry.require(m.type_name).schema_version
            for p in projections for m in p.rows}


def _python_wants(store: EventStore, projections: Sequence[Projection]) -> dict[str, int]:
    """The stored events Python must decode, as type -> the one schema version of it that
    it need not (`_ANY_VERSION`: it needs every version): all of a Python fold's types (they
    are few), and row-mapped types stored under an older schema version, to upcast (rarer
    still). The server folds the rest from the log itself."""
    return {**_row_versions(store, projections),
            **dict.fromkeys((t for p in projections for t in p.folds), _ANY_VERSION)}


def _decode_filter(wanted: dict[str, int]) -> DecodeFilter:
    def needs(type_name: str, version: int) -> bool:
        skipped = wanted.get(type_name)
        return skipped is not None and skipped != version

    return needs


@dataclasses.dataclass(frozen=True)
class _Chunk:
    """A range of the log folded in one transaction: (where the last one ended, end]."""

    end: Checkpoint
    size: int
    python: list[RecordedEvent]  # its events that need Python (see chunk_after)


async def chunk_after(conn: database.Connection, store: EventStore,
                       projections: Sequence[Projection], after: Checkpoint,
                       limit: int) -> _Chunk | None:
    """The next chunk of at most `limit` events after `after`, with its events that Python
    needs (`_python_wants`), read only when the chunk holds some."""
    row = await conn.fetchrow(_Q["chunk_end"], after.tx_id, after.position, limit)
    if row is None:
        return None
    end = Checkpoint(row["tx_id"], row["global_position"])
    wanted = _python_wants(store, projections)
    needs = _decode_filter(wanted)
    python: list[RecordedEvent] = []
    if any(needs(t, v) for t, v in zip(row["types"], row["schema_versions"], strict=True)):
        python = store.reader.decode(await conn.fetch(
            _Q["read_between"], after.tx_id, after.position, end.tx_id, end.position,
            list(wanted), list(wanted.values())))
    return _Chunk(end, row["events"], python)


async def create_views(conn: database.Connection, schema: str) -> None:
    for sql in _VIEWS.values():
        await conn.execute(sql.replace("{schema}", check_schema(schema)))


# -- the live runner ----------------------------------------------------------------------------


@dataclasses.dataclass
class RunnerStats:
    batches: int = 0
    events: int = 0


class Runner:
    """Keeps the live projections current, as a service: `await Runner(store).run()`."""

    def __init__(self, store: EventStore, projections: Sequence[Projection] = ALL,
                 *, poll_interval: float = 1.0, batch_size: int = 2000,
                 on_commit: Callable[[Sequence[RecordedEvent]], None] | None = None) -> None:
        self.store = store
        self.projections = tuple(projections)
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.on_commit = on_commit  # told of each batch once its rows are committed
        self.stats = RunnerStats()

    async def run(self, stop: anyio.Event | None = None,
                  progress: Progress | None = None) -> None:
        """Serve until `stop` is set (or forever), surviving database restarts: each
        attempt resumes from the committed checkpoints."""
        running = stop or anyio.Event()
        await database.serve_until_stopped(lambda: self._run(running, progress), running,
                                           "projection runner")

    async def _run(self, stop: anyio.Event, progress: Progress | None) -> None:
        """Holds the runner lock while serving."""
        async with leadership.lead(self.store.dsn, leadership.PROJECTION_RUNNER, stop,
                                   "projection runner") as leading:
            if not leading:
                return
            missing = [p for p in self.projections
                       if await self.store.find_checkpoint(p.checkpoint_name) is None]
            if missing:
                log.info("building %s from the log", ", ".join(p.name for p in missing))
                await rebuild(self.store, missing, progress=progress)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._serve, stop, progress, name="props-projection-runner")
                await stop.wait()
                tg.cancel_scope.cancel()

    async def _serve(self, stop: anyio.Event, progress: Progress | None) -> None:
        while not stop.is_set():
            try:
                await self._follow(progress)
            except errors.CheckpointConflict as exc:
                # A rebuild swapped tables and moved checkpoints: start again from them.
                log.info("projection checkpoints moved (%s); resuming from them", exc)

    async def _follow(self, progress: Progress | None) -> None:
        positions: dict[str, Checkpoint] = {}
        for p in self.projections:
            cp = await self.store.find_checkpoint(p.checkpoint_name)
            if cp is None:  # dropped meanwhile: rebuild it
                await rebuild(self.store, [p], progress=progress)
                cp = await self.store.load_checkpoint(p.checkpoint_name)
            positions[p.name] = cp
        start = min(positions.values())
        async with self.store.subscribe(start, batch_size=self.batch_size,
                                        poll_interval=self.poll_interval,
                                        decode=_decode_filter(_python_wants(
                                            self.store, self.projections))) as sub:
            async for batch in sub:
                last = batch[-1]
                new = Checkpoint(last.tx_id, last.global_position)
                async with self.store.pool.acquire() as conn, conn.transaction():
                    await leadership.for_transaction(conn, leadership.PROJECTION_LIVE_WRITE)
                    await fold_settings(conn)
                    await commit_range(conn, self.store, LIVE, self.projections, batch,
                                  positions, new, lambda p: p.checkpoint_name)
                for p in self.projections:
                    positions[p.name] = max(positions[p.name], new)
                self.stats.batches += 1
                self.stats.events += len(batch)
                if self.on_commit:
                    self.on_commit(batch)
                if progress:
                    progress(len(batch))


# -- rebuild ----------------------------------------------------------------------------------


@dataclasses.dataclass
class RebuildReport:
    projections: list[str]
    events: int
    seconds: float
    resumed: bool

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


async def rebuild(store: EventStore, projections: Sequence[Projection] = ALL, *,
                  progress: Progress | None = None,
                  chunk: int = REBUILD_CHUNK) -> RebuildReport:
    """Rebuild `projections` from the log beside the live tables, then swap them in."""
    projections = tuple(projections)
    began = time.perf_counter()
    async with leadership.exclusive(store.dsn, leadership.PROJECTION_REBUILD):
        resumed = await _prepare_shadow(store, projections)
        positions = {p.name: await store.load_checkpoint(_shadow_name(p))
                     for p in projections}
        # The folds read ranges of the log filtered by type: plans need fresh statistics.
        await store.analyze_stale_partitions()
        events = await _fill_shadow(store, projections, positions, chunk, progress)
        # New tables have no statistics: analysts' first queries would be planned blind.
        async with anyio.create_task_group() as tg:  # on every core
            for table in (t.name for p in projections for t in p.tables):
                tg.start_soon(store.pool.execute, f"ANALYZE {SHADOW}.{table}")
        events += await _swap_when_unlocked(store, projections, positions)
    return RebuildReport([p.name for p in projections], events,
                         time.perf_counter() - began, resumed)


async def _prepare_shadow(store: EventStore, projections: Sequence[Projection]) -> bool:
    """Create the shadow tables, or keep those of an interrupted rebuild of the same set.
    Returns whether it resumes."""
    async with store.pool.acquire() as conn, conn.transaction():
        tables = {r[0] for r in await conn.fetch(_Q["tables_in_schema"], SHADOW)}
        wanted = {t.name for p in projections for t in p.tables}
        started = all([await store.find_checkpoint(_shadow_name(p)) is not None
                       for p in projections])
        if tables == wanted and started:
            return True
        # The shadow schema stays (migration 0007 made it): the service that rebuilds owns
        # its tables, not the schemas of the database.
        for name in sorted(tables):
            await conn.execute(f"DROP TABLE IF EXISTS {SHADOW}.{name} CASCADE")
        await Checkpoints.forget(conn, SHADOW_CHECKPOINT)
        await create(conn, SHADOW, [t for p in projections for t in p.tables])
        for p in projections:
            await store.save_checkpoint(_shadow_name(p), START, START, conn=conn)
    return False


async def _fill_shadow(store: EventStore, projections: Sequence[Projection],
                       positions: dict[str, Checkpoint], limit: int,
                       progress: Progress | None) -> int:
    """Fold the log into the shadow tables, one committed chunk at a time. One task measures
    out the chunks; each projection folds them in order on a connection of its own, at its
    own pace (up to `_AHEAD` chunks ahead of the slowest): the server folds on every core
    and none waits for another's chunk. Returns how many events were folded."""
    sends, receives = zip(*(anyio.create_memory_object_stream[_Chunk](_AHEAD)
                            for _ in projections), strict=True)
    folded_send, folded = anyio.create_memory_object_stream[_Chunk](len(projections) * _AHEAD)

    async def measure() -> None:
        after = min(positions.values())
        async with contextlib.AsyncExitStack() as stack:
            for send in sends:
                stack.enter_context(send)
            while True:
                async with store.pool.acquire() as conn:
                    chunk = await chunk_after(conn, store, projections, after, limit)
                if chunk is None:
                    return
                for send in sends:
                    await send.send(chunk)
                after = chunk.end

    async def fold_all(p: Projection, chunks: anyio.abc.ObjectReceiveStream[_Chunk],
                       done: anyio.abc.ObjectSendStream[_Chunk]) -> None:
        async with chunks, done:
            async for chunk in chunks:
                await _flush(store, p, chunk, positions)
                await done.send(chunk)

    total = 0
    finished: dict[Checkpoint, int] = {}
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(measure)
        with folded_send:
            for p, chunks in zip(projections, receives, strict=True):
                tg.start_soon(fold_all, p, chunks, folded_send.clone())
        async with folded:
            async for chunk in folded:  # a chunk is folded once every projection folded it
                finished[chunk.end] = finished.get(chunk.end, 0) + 1
                if finished[chunk.end] < len(projections):
                    continue
                total += chunk.size
                try:
                    if progress:
                        progress(chunk.size)
                except BaseException as exc:  # (raised as itself, not in a task group's)
                    failure = exc
                    tg.cancel_scope.cancel()
                    break
    if failure is not None:
        raise failure
    return total


async def _flush(store: EventStore, p: Projection, chunk: _Chunk,
                 positions: dict[str, Checkpoint]) -> None:
    async with store.pool.acquire() as conn, conn.transaction():
        await fold_settings(conn)
        await commit_range(conn, store, SHADOW, [p], chunk.python, positions, chunk.end,
                      _shadow_name)
    positions[p.name] = max(positions[p.name], chunk.end)


async def _swap_when_unlocked(store: EventStore, projections: Sequence[Projection],
                              positions: dict[str, Checkpoint]) -> int:
    """The swap must lock several live tables while analysts' queries lock them too, in their
    own order. Waiting on one lock while holding another could deadlock with a reader (and
    the reader is the one PostgreSQL might cancel), so the swap waits briefly for each lock,
    and on a timeout rolls back everything, releasing what it held, and tries again."""
    for attempt in range(1, 200):
        trial = dict(positions)
        try:
            caught_up = await _swap(store, projections, trial)
        except asyncpg.LockNotAvailableError:
            await anyio.sleep(min(1.0, 0.01 * attempt))
            continue
        positions.update(trial)
        return caught_up
    raise errors.PropsError("could not take the live projection tables for the swap: "
                            "readers kept them busy; the rebuilt tables are kept, run the "
                            "rebuild again to retry the swap")


async def _swap(store: EventStore, projections: Sequence[Projection],
                positions: dict[str, Checkpoint]) -> int:
    """Catch up and swap, in one transaction that holds the live tables exclusively."""
    async with store.pool.acquire() as conn, conn.transaction():
        await leadership.for_transaction(conn, leadership.PROJECTION_LIVE_WRITE)
        await conn.execute(f"SET LOCAL lock_timeout = '{SWAP_LOCK_WAIT_MS}ms'")
        live = {r[0] for r in await conn.fetch(_Q["tables_in_schema"], LIVE)}
        mine = [t.name for p in projections for t in p.tables]
        for name in sorted(live & set(mine)):
            await conn.execute(f"LOCK TABLE {LIVE}.{name} IN ACCESS EXCLUSIVE MODE")
        # Events committed since the last chunk, folded on this transaction's connection.
        caught_up = 0
        while (chunk := await chunk_after(conn, store, projections, min(positions.values()),
                                           REBUILD_CHUNK)) is not None:
            await commit_range(conn, store, SHADOW, projections, chunk.python, positions, chunk.end,
                          _shadow_name)
            for p in projections:
                positions[p.name] = max(positions[p.name], chunk.end)
            caught_up += chunk.size
        # The views read every projection's tables: drop them, swap, recreate them.
        for view in reversed(list(_VIEWS)):  # dependents first
            await conn.execute(f"DROP VIEW IF EXISTS {LIVE}.{view}")
        for name in mine:
            await conn.execute(f"DROP TABLE IF EXISTS {LIVE}.{name}")
            await conn.execute(f"ALTER TABLE {SHADOW}.{name} SET SCHEMA {LIVE}")
        complete = {r[0] for r in await conn.fetch(_Q["tables_in_schema"], LIVE)}
        if all(t.name in complete for p in ALL for t in p.tables):
            await create_views(conn, LIVE)
        await conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {LIVE} TO {ANALYST_ROLE}")
        for p in projections:
            await Checkpoints.overwrite(conn, p.checkpoint_name, positions[p.name])
        await Checkpoints.forget(conn, SHADOW_CHECKPOINT)
    return caught_up


# -- status -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProjectionStatus:
    name: str
    version: int
    checkpoint: Checkpoint | None
    lag_events: int
    lag_seconds: float | None


async def status(store: EventStore,
                 projections: Sequence[Projection] = ALL) -> list[ProjectionStatus]:
    out = []
    for p in projections:
        cp = await store.find_checkpoint(p.checkpoint_name)
        at = cp or START
        lag = await store.pool.fetchrow(_Q["lag"], at.tx_id, at.position)
        assert lag is not None
        out.append(ProjectionStatus(p.name, p.version, cp, lag["events"], lag["seconds"]))
    return out




async def snapshot_rows(store: EventStore) -> dict[str, list[tuple[object, ...]]]:
    """Every live projection table's rows, sorted: to compare two states of the tables."""
    out: dict[str, list[tuple[object, ...]]] = {}
    for p in ALL:
        for t in p.tables:
            rows = await store.pool.fetch(f"SELECT {', '.join(t.names)} FROM {LIVE}.{t.name}")
            out[t.name] = sorted(tuple(r) for r in rows)
    return out

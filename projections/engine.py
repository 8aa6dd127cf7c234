"""Keeping projections current (the runner) and rebuilding them beside the live ones.

Both fold a range of the log, (checkpoint, end], into a projection's tables in one
transaction that also moves its checkpoint (`folding`). So a runner killed at any point resumes
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
import time
from collections.abc import Callable, Sequence

import anyio
import anyio.abc

from props.core.domain import consumer_loop
from props.core.log import database, errors, leadership, retries, stopping
from props.core.log.checkpoints import START, Checkpoint, Checkpoints
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.projections import parking, readers, views
from props.projections.base import Projection
from props.projections.folding import (
    Chunk,
    chunk_after,
    commit_range,
    decode_filter,
    derive_all,
    fold_settings,
    python_wants,
)
from props.projections.grading import GRADING
from props.projections.ground_truth import GROUND_TRUTH
from props.projections.names import LIVE, NAMES, SHADOW
from props.projections.run_tables import EXCLUSIONS, IMPORTS, ISSUES, RUNS, USAGE
from props.projections.tables import create
from props.schema import queries

log = logging.getLogger(__name__)

ALL: tuple[Projection, ...] = (GROUND_TRUTH, RUNS, ISSUES, USAGE, GRADING, IMPORTS,
                               EXCLUSIONS)
ANALYST_ROLE = database.ANALYST_ROLE  # reads the live projections only
REBUILD_CHUNK = 50_000
_AHEAD = 2  # chunks a projection's rebuild may fold ahead of the slowest one's
SWAP_LOCK_WAIT_MS = 100  # well under deadlock_timeout (1 s): the swap yields first


_Q = queries.load("projections")

assert tuple(p.name for p in ALL) == NAMES, "projections/names.py lists every projection"

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


@dataclasses.dataclass
class RunnerStats:
    batches: int = 0
    events: int = 0
    parked: int = 0


class Runner:
    """Keeps the live projections current, as a service, until cancelled:
    `await Runner(store).run()`. The following, committing, parking and stopping are the
    shared consumer loop's (`consumer_loop.Loop`, the reactors' too); the runner says how a
    batch is committed: folded into every projection with their checkpoints, in one
    transaction."""

    what = "projection runner"
    lock = leadership.PROJECTION_RUNNER
    parks_as = "projection runner"  # (never: each projection parks under its own name)

    def __init__(self, store: EventStore, projections: Sequence[Projection] = ALL,
                 *, poll_interval: float = 1.0, batch_size: int = 2000,
                 on_commit: Callable[[Sequence[RecordedEvent]], None] | None = None,
                 stop: stopping.Stop | None = None) -> None:
        self.store = store
        self.projections = tuple(projections)
        self.on_commit = on_commit  # told of each batch once its rows are committed
        self.stats = RunnerStats()
        self.decode = decode_filter(python_wants(store, self.projections))
        self.loop = consumer_loop.Loop(store, self, stop=stop, poll_interval=poll_interval,
                                       batch_size=batch_size)
        self.standing = self.loop.standing  # whether it leads or stands by
        self._progress: Progress | None = None
        self._positions: dict[str, Checkpoint] = {}
        self._skipped: dict[str, frozenset[int]] = {}

    async def run(self, progress: Progress | None = None) -> None:
        """Serve until cancelled, surviving database restarts: each attempt resumes from the
        committed checkpoints (a rebuild that moved them included). A stop lets the batch
        in hand commit."""
        self._progress = progress
        await self.loop.run()

    async def begin(self, tg: anyio.abc.TaskGroup) -> Checkpoint:
        """The projections never built (or dropped) are built first; the log is followed
        from the least advanced checkpoint."""
        missing = [p for p in self.projections
                   if await self.store.find_checkpoint(p.checkpoint_name) is None]
        if missing:
            log.info("building %s from the log", ", ".join(p.name for p in missing))
            await rebuild(self.store, missing, progress=self._progress)
        self._positions = {p.name: await self.store.load_checkpoint(p.checkpoint_name)
                           for p in self.projections}
        self._skipped = await parking.skips(self.store, self.projections)
        return min(self._positions.values())

    def handler(self, rec: RecordedEvent) -> consumer_loop.Handler | None:
        """None: the runner handles no event on its own; it folds whole batches (`commit`)."""
        return None

    async def commit(self, batch: Sequence[RecordedEvent], upto: Checkpoint) -> None:
        positions, skipped = self._positions, self._skipped
        # The batch is the whole range (every projection's checkpoint is at or after its
        # start): a table none of whose types it holds is not folded. Per batch of the
        # quick rescore bench, seven statements that found nothing (about 15% of the
        # runner's time on the server).
        types = frozenset(rec.type_name for rec in batch)

        async def fold() -> None:
            async with self.store.sql.acquire() as conn, conn.transaction():
                await leadership.for_transaction(conn, leadership.PROJECTION_LIVE_WRITE)
                await fold_settings(conn)
                await commit_range(conn, self.store, LIVE, self.projections, batch, positions,
                                   upto, lambda q: q.checkpoint_name, skips=skipped,
                                   types=types)

        self.stats.parked += await parking.fold_or_park(
            self.store, LIVE, self.projections, batch, positions, upto, skipped, fold)
        for p in self.projections:
            positions[p.name] = max(positions[p.name], upto)
        self.stats.batches += 1
        self.stats.events += len(batch)
        if self.on_commit:
            self.on_commit(batch)
        if self._progress:
            self._progress(len(batch))


# -- rebuild ----------------------------------------------------------------------------------


@dataclasses.dataclass
class RebuildReport:
    projections: list[str]
    events: int
    seconds: float
    resumed: bool
    readers_ended: list[readers.Reader] = dataclasses.field(default_factory=list)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


async def rebuild(store: EventStore, projections: Sequence[Projection] = ALL, *,
                  progress: Progress | None = None,
                  chunk: int = REBUILD_CHUNK,
                  reader_grace: float = readers.READER_GRACE_SECONDS) -> RebuildReport:
    """Rebuild `projections` from the log beside the live tables, then swap them in. The
    swap waits `reader_grace` seconds for analysts' transactions that hold the live tables,
    then ends them (`RebuildReport.readers_ended`, see props.projections.readers)."""
    projections = tuple(projections)
    began = time.perf_counter()
    async with leadership.exclusive(store.dsn, leadership.PROJECTION_REBUILD):
        resumed = await _prepare_shadow(store, projections)
        positions = {p.name: await store.load_checkpoint(_shadow_name(p))
                     for p in projections}
        skipped = await parking.skips(store, projections)
        # The folds read ranges of the log filtered by type: plans need fresh statistics.
        await store.analyze_stale_partitions()
        events = await _fill_shadow(store, projections, positions, skipped, chunk, progress)
        # The derived tables made whole, and every table analyzed (new tables have no
        # statistics: analysts' first queries would be planned blind), on every core.
        derived = {d.table.name for p in projections for d in p.derived}
        async with anyio.create_task_group() as tg:
            tg.start_soon(_derive, store, projections, sorted(derived),
                          name="props-rebuild-derive")
            for table in (t.name for p in projections for t in p.tables):
                if table not in derived:
                    tg.start_soon(store.sql.execute, f"ANALYZE {SHADOW}.{table}",
                                  name=f"props-rebuild-analyze {table}")
        ended: list[readers.Reader] = []
        events += await _swap_when_unlocked(store, projections, positions, skipped,
                                            reader_grace, ended)
    return RebuildReport([p.name for p in projections], events,
                         time.perf_counter() - began, resumed, ended)


async def _derive(store: EventStore, projections: Sequence[Projection],
                  tables: list[str]) -> None:
    async with store.sql.acquire() as conn, conn.transaction():
        await fold_settings(conn)
        await derive_all(conn, SHADOW, projections)
    for table in tables:
        await store.sql.execute(f"ANALYZE {SHADOW}.{table}")


async def _prepare_shadow(store: EventStore, projections: Sequence[Projection]) -> bool:
    """Create the shadow tables, or keep those of an interrupted rebuild of the same set.
    Returns whether it resumes."""
    async with store.sql.acquire() as conn, conn.transaction():
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
                       positions: dict[str, Checkpoint], skipped: dict[str, frozenset[int]],
                       limit: int, progress: Progress | None) -> int:
    """Fold the log into the shadow tables, one committed chunk at a time. One task measures
    out the chunks; each projection folds them in order on a connection of its own, at its
    own pace (up to `_AHEAD` chunks ahead of the slowest): the server folds on every core
    and none waits for another's chunk. Returns how many events were folded."""
    sends, receives = zip(*(anyio.create_memory_object_stream[Chunk](_AHEAD)
                            for _ in projections), strict=True)
    folded_send, folded = anyio.create_memory_object_stream[Chunk](len(projections) * _AHEAD)

    async def measure() -> None:
        after = min(positions.values())
        async with contextlib.AsyncExitStack() as stack:
            for send in sends:
                stack.enter_context(send)
            while True:
                async with store.sql.acquire() as conn:
                    chunk = await chunk_after(conn, store, projections, after, limit)
                if chunk is None:
                    return
                for send in sends:
                    await send.send(chunk)
                after = chunk.end

    async def fold_all(p: Projection, chunks: anyio.abc.ObjectReceiveStream[Chunk],
                       done: anyio.abc.ObjectSendStream[Chunk]) -> None:
        async with chunks, done:
            async for chunk in chunks:
                await _flush(store, p, chunk, positions, skipped)
                await done.send(chunk)

    total = 0
    finished: dict[Checkpoint, int] = {}
    failure: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(measure, name="props-rebuild-measure")
        with folded_send:
            for p, chunks in zip(projections, receives, strict=True):
                tg.start_soon(fold_all, p, chunks, folded_send.clone(),
                              name=f"props-rebuild-fold {p.name}")
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


async def _flush(store: EventStore, p: Projection, chunk: Chunk,
                 positions: dict[str, Checkpoint], skipped: dict[str, frozenset[int]]) -> None:
    async def commit() -> None:
        async with store.sql.acquire() as conn, conn.transaction():
            await fold_settings(conn)
            await commit_range(conn, store, SHADOW, [p], chunk.python, positions, chunk.end,
                               _shadow_name, derive=False,  # made whole once folded
                               skips=skipped)

    await parking.fold_or_park(store, SHADOW, [p], chunk.python, positions, chunk.end,
                               skipped, commit, derive=False)
    positions[p.name] = max(positions[p.name], chunk.end)


async def _swap_when_unlocked(store: EventStore, projections: Sequence[Projection],
                              positions: dict[str, Checkpoint],
                              skipped: dict[str, frozenset[int]], grace: float,
                              ended: list[readers.Reader]) -> int:
    """The swap must lock several live tables while analysts' queries lock them too, in their
    own order. Waiting on one lock while holding another could deadlock with a reader (and
    the reader is the one PostgreSQL might cancel), so the swap waits briefly for each lock,
    and on a timeout rolls back everything, releasing what it held, and tries again. Past
    `grace` seconds, each attempt first ends the analysts' sessions holding the tables
    (appended to `ended`): a long transaction of short reads must not hold it forever."""
    began = time.monotonic()

    async def attempt() -> int:
        if time.monotonic() - began >= grace:
            ended.extend(await readers.end(store))
        trial = dict(positions)
        caught_up = await _swap(store, projections, trial, skipped)
        positions.update(trial)
        return caught_up

    try:
        return await retries.swap_for(grace + readers.AFTER_GRACE_SECONDS).call(
            attempt, retries.of_kinds(errors.Busy))
    except errors.Busy as exc:
        raise errors.PropsError(
            "could not take the live projection tables for the swap: readers kept them "
            "busy; the rebuilt tables are kept, run the rebuild again to retry the swap"
        ) from exc


async def _swap(store: EventStore, projections: Sequence[Projection],
                positions: dict[str, Checkpoint], skipped: dict[str, frozenset[int]]) -> int:
    """Catch up and swap, in one transaction that holds the live tables exclusively."""
    async with store.sql.acquire() as conn, conn.transaction():
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
            async def commit(chunk: Chunk = chunk) -> None:  # (a savepoint: a poison undone)
                async with conn.transaction():
                    await commit_range(conn, store, SHADOW, projections, chunk.python,
                                       positions, chunk.end, _shadow_name, skips=skipped)

            await parking.fold_or_park(store, SHADOW, projections, chunk.python, positions,
                                       chunk.end, skipped, commit, conn=conn)
            for p in projections:
                positions[p.name] = max(positions[p.name], chunk.end)
            caught_up += chunk.size
        # The views read every projection's tables: drop them, swap, recreate them.
        await views.drop(conn, LIVE)
        for name in mine:
            await conn.execute(f"DROP TABLE IF EXISTS {LIVE}.{name}")
            await conn.execute(f"ALTER TABLE {SHADOW}.{name} SET SCHEMA {LIVE}")
        complete = {r[0] for r in await conn.fetch(_Q["tables_in_schema"], LIVE)}
        if all(t.name in complete for p in ALL for t in p.tables):
            await views.create(conn, LIVE)
        await conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {LIVE} TO {ANALYST_ROLE}")
        for p in projections:
            await Checkpoints.overwrite(conn, p.checkpoint_name, positions[p.name])
        await Checkpoints.forget(conn, SHADOW_CHECKPOINT)
    return caught_up

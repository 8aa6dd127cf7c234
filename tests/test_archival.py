"""Archival: old partitions of the log leave the hot table as verified files, and come back.

Each test shrinks its log's partitions to 100 positions, so a few thousand events span many.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from props.core.domain import catalog
from props.core.domain.archive import archival, exports, imports
from props.core.log import errors
from props.core.log.checkpoints import START
from props.core.log.store import EventStore
from props.projections import status as projection_status
from props.tools.checks.workload import Workload
from tests.conftest import fence_clear, fence_held, rebuilt

SIZE = 100


async def small_partitions(store: EventStore, size: int = SIZE) -> None:
    """Partitions of `size` positions (the log must be empty)."""
    async with store.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM props.events") == 0
        for row in await conn.fetch("SELECT name FROM props.log_partitions"):
            await conn.execute(f"DROP TABLE props.{row['name']}")
        await conn.execute("DELETE FROM props.log_partitions")
        await conn.execute("UPDATE props.log_settings SET partition_size = $1", size)
        await conn.execute("SELECT props.ensure_partitions()")


async def history(store: EventStore, runs: int, seed: int = 3) -> Workload:
    work = Workload(seed=seed, issues_per_run=(2, 6))
    await work.setup(store)
    await work.append_runs(store, runs)
    return work


async def rows(store: EventStore) -> list[tuple[int, int, uuid.UUID, str, int]]:
    return [tuple(r) for r in await store.pool.fetch(
        "SELECT global_position, tx_id::text::bigint, event_id, stream_id, stream_version "
        "FROM props.events ORDER BY global_position")]


async def partition_of(store: EventStore, position: int) -> str:
    name: str = await store.pool.fetchval(
        "SELECT name FROM props.log_partitions WHERE $1 >= from_position "
        "AND $1 < to_position", position)
    return name


async def test_archive_and_restore_round_trip(store: EventStore, tmp_path: Path) -> None:
    await small_partitions(store)
    await history(store, 60)
    await fence_clear(store)  # (else archival stops at the fence: see below)
    # A held run in the third partition keeps that partition hot.
    held = await store.pool.fetchval(
        "SELECT substr(stream_id, 5) FROM props.events "
        "WHERE global_position BETWEEN 250 AND 299 AND category = 'run' LIMIT 1")
    await store.append(f"retention-{held}", [catalog.RetentionHeld(
        run_id=uuid.UUID(held), reason="under review")])
    await rebuilt(store)
    projected = await projection_status.snapshot_rows(store)
    before = await rows(store)
    assert len(before) > 6 * SIZE

    report = await archival.archive_before(store, 6 * SIZE + 1, tmp_path / "archive")
    archived = {d.partition for d in report.archived}
    kept = {k.partition: k.why for k in report.kept}
    assert await partition_of(store, 1) in kept  # the specimens, definition and scorers
    assert "snapshot" in kept[await partition_of(store, 1)]
    third = await partition_of(store, 250)
    assert third in kept and "under review" in kept[third] and held in kept[third]
    assert len(archived) == 4 and report.stopped is None
    for done in report.archived:
        assert exports.verify(done.file).events == done.events > 0
        assert await store.pool.fetchval("SELECT to_regclass($1)",
                                         f"props.{done.partition}") is None
    hot = await rows(store)
    archived_count = sum(d.events for d in report.archived)
    assert len(hot) == len(before) - archived_count
    assert set(hot) <= set(before)
    assert await projection_status.snapshot_rows(store) == projected  # analysts keep their rows
    status = {p["name"]: p for p in await archival.partitions(store)}
    assert {n for n, p in status.items() if p["state"] == "archived"} == archived

    # Reads of the log skip the hole; a late event of an archived run continues its stream.
    await fence_clear(store)
    seen = [r.global_position for b in [b async for b in store.iter_all(START)] for r in b]
    assert seen == sorted(p for p, *_ in hot)

    # Each file puts its partition back: same positions, transactions, ids and versions.
    for done in report.archived:
        restored = await imports.import_archive(store, done.file)
        assert (restored.restored, restored.imported) == (done.partition, done.events)
    assert await rows(store) == before
    again = await imports.import_archive(store, report.archived[0].file)
    assert again.restored is None and again.imported == 0  # restored once, not twice
    await rebuilt(store)
    assert await projection_status.snapshot_rows(store) == projected

    # Released, the held run's partition can go too.
    await store.append(f"retention-{held}", [catalog.RetentionReleased(run_id=uuid.UUID(held))])
    await rebuilt(store)
    second = await archival.archive_before(store, 6 * SIZE + 1, tmp_path / "archive2")
    assert third in {d.partition for d in second.archived}


async def test_a_late_event_of_an_archived_run_continues_its_stream(
        store: EventStore, tmp_path: Path) -> None:
    await small_partitions(store)
    await history(store, 30)
    await fence_clear(store)  # (else archival stops at the fence: see below)
    found = await store.pool.fetchrow(
        "SELECT stream_id, max(stream_version) FROM props.events "
        "WHERE category = 'run' AND global_position < $1 GROUP BY stream_id "
        "HAVING max(global_position) < $2 LIMIT 1", 2 * SIZE, 2 * SIZE)
    assert found is not None  # the history has such a stream
    stream, version = found
    report = await archival.archive_before(store, 2 * SIZE + 1, tmp_path)
    assert len(report.archived) == 1
    assert await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE stream_id = $1", stream) == 0
    run_id = uuid.UUID(stream.removeprefix("run-"))
    result = await store.append(stream, [catalog.RunCancelRequested(run_id=run_id)])
    assert result.first_version == version + 1  # not 1: the head outlives the partition
    with pytest.raises(errors.ConcurrencyConflict):
        await store.append(stream, [catalog.RunCancelRequested(run_id=run_id)],
                           expected_version=version)


async def test_a_failed_archive_leaves_everything_in_the_table(
        store: EventStore, tmp_path: Path) -> None:
    await small_partitions(store)
    await history(store, 20)
    await fence_clear(store)  # (a shared server's open transactions would stop archival)
    before = await rows(store)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(errors.PropsError, match="cannot write archives"):
        await archival.archive_before(store, 3 * SIZE + 1, not_a_dir)
    assert await rows(store) == before

    # A consumer that has not read the range: archival stops there and says so.
    await store.pool.execute("INSERT INTO props.checkpoints (name, tx_id, position) "
                             "VALUES ('slow-reader', '1', 5)")
    report = await archival.archive_before(store, 3 * SIZE + 1, tmp_path / "a")
    assert report.archived == [] and report.stopped and "slow-reader" in report.stopped
    assert await rows(store) == before

    # A tampered archive file restores nothing.
    await store.pool.execute("DELETE FROM props.checkpoints WHERE name = 'slow-reader'")
    done = (await archival.archive_before(store, 2 * SIZE + 1, tmp_path / "b")).archived
    assert len(done) == 1
    data = bytearray(done[0].file.read_bytes())
    data[len(data) // 2] ^= 0x01
    done[0].file.write_bytes(bytes(data))
    with pytest.raises(exports.ArchiveError):
        await imports.import_archive(store, done[0].file)
    assert len(await rows(store)) == len(before) - done[0].events



async def test_archival_stops_where_the_fence_hides_events(store: EventStore,
                                                          tmp_path: Path) -> None:
    """A range written behind a transaction still open elsewhere: the export could not see
    it whole, so archival stops there and names what holds the fence (before, it exported
    0 events, then refused to detach the partition, after the work)."""
    await small_partitions(store)
    async with fence_held(store):
        await history(store, 20)
        before = await rows(store)
        report = await archival.archive_before(store, 3 * SIZE + 1, tmp_path / "a")
    assert report.archived == [] and report.stopped
    assert "wait behind the fence" in report.stopped and "pid" in report.stopped
    assert await rows(store) == before

async def test_archive_while_writers_append_and_readers_read(
        store: EventStore, tmp_path: Path) -> None:
    """Nothing lost, nothing twice: every event ever appended is either hot or in exactly
    one archive file."""
    await small_partitions(store)
    work = await history(store, 30)
    await fence_clear(store)  # (else archival stops at the fence: see below)
    head = await store.pool.fetchval("SELECT max(global_position) FROM props.events")
    passes: list[int] = []
    stop = anyio.Event()

    async def write() -> None:
        for _ in range(40):
            await work.append_runs(store, 1)
            await anyio.sleep(0.005)

    async def read() -> None:
        while not stop.is_set():
            ids = [r.event_id for b in [b async for b in store.iter_all(START)] for r in b]
            assert len(ids) == len(set(ids))
            passes.append(len(ids))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        async with anyio.create_task_group() as writers:
            writers.start_soon(write)
            report = await archival.archive_before(store, head + 1, tmp_path)
        stop.set()
    assert len(report.archived) >= 2 and passes
    hot = {r[2] for r in await rows(store)}
    in_files: list[uuid.UUID] = []
    for done in report.archived:
        for obj in exports.objects(line for _n, line in exports._lines(done.file)):
            if obj["kind"] == "event":
                in_files.append(uuid.UUID(obj["event_id"]))
    assert len(in_files) == len(set(in_files)) and not hot & set(in_files)
    every = {r[0] for r in await store.pool.fetch("SELECT event_id FROM props.event_ids")}
    assert hot | set(in_files) == every

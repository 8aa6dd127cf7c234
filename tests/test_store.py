"""The store API: append semantics, idempotency, conflicts, bad input, blobs, checkpoints."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import anyio
import asyncpg
import pydantic
import pytest

from props.core.domain import catalog
from props.core.domain.store import open_store
from props.core.log import errors
from props.core.log.checkpoints import START, Checkpoint
from props.core.log.events import (
    MAX_EVENT_BYTES,
    Event,
    EventRegistry,
    NewEvent,
    UnknownEvent,
    UnreadableEvent,
)
from props.core.log.store import COPY_THRESHOLD, EventStore

Make = Callable[..., Any]


async def count(store: EventStore) -> int:
    n: int = await store.pool.fetchval("SELECT count(*) FROM props.events")
    return n


async def test_append_and_read_back(store: EventStore, new_event: Make) -> None:
    events = [new_event(f"p{i}") for i in range(3)]
    result = await store.append("run-a", events, expected_version=0,
                                metadata={"actor": "test"})
    assert (result.first_version, result.last_version, result.already_stored) == (1, 3, False)
    got = await store.read_stream("run-a")
    assert [r.event for r in got] == events
    assert [r.stream_version for r in got] == [1, 2, 3]
    assert all(r.metadata == {"actor": "test"} and r.category == "run" for r in got)
    assert [r.event for r in await store.read_all()] == events


@pytest.mark.parametrize("size", [1, 5, COPY_THRESHOLD + 5])  # each insert path
async def test_expected_version_conflict_names_stream_and_versions(
    store: EventStore, new_event: Make, size: int
) -> None:
    await store.append("run-b", [new_event() for _ in range(2)])
    for wrong in (0, 1, 7):
        with pytest.raises(errors.ConcurrencyConflict) as info:
            await store.append("run-b", [new_event() for _ in range(size)],
                               expected_version=wrong)
        assert info.value.stream_id == "run-b"
        assert (info.value.expected, info.value.actual) == (wrong, 2)
        assert "'run-b' is at version 2" in str(info.value)
    assert await count(store) == 2  # nothing written
    ok = await store.append("run-b", [new_event() for _ in range(size)], expected_version=2)
    assert ok.last_version == 2 + size


@pytest.mark.parametrize("size", [1, 5, COPY_THRESHOLD + 5])
async def test_retried_append_is_a_no_op(store: EventStore, new_event: Make, size: int) -> None:
    batch = [NewEvent(new_event(f"p{i}")) for i in range(size)]
    first = await store.append("run-c", batch, expected_version=0)
    again = await store.append("run-c", batch, expected_version=0)
    assert not first.already_stored and again.already_stored
    assert (again.first_version, again.last_version) == (1, size)
    assert await count(store) == size


async def test_event_id_reused_elsewhere_is_refused(store: EventStore, new_event: Make) -> None:
    e = NewEvent(new_event())
    await store.append("run-d", [e])
    with pytest.raises(errors.DuplicateEventConflict, match="already stored"):
        await store.append("run-other", [NewEvent(new_event()), e])
    assert await count(store) == 1


async def test_malformed_payload_is_refused_with_the_field_named(store: EventStore) -> None:
    with pytest.raises(errors.InvalidEvent, match=r"duration_seconds: .*greater than or equal"):
        store.registry.parse("phase.completed", {
            "run_id": str(uuid.uuid4()), "phase": "x", "duration_seconds": -1})
    with pytest.raises(errors.InvalidEvent, match="run_id"):
        store.registry.parse("phase.completed", {"phase": "x", "duration_seconds": 1})
    with pytest.raises(errors.InvalidEvent, match="bogus: Extra inputs"):
        store.registry.parse("phase.completed", {
            "run_id": str(uuid.uuid4()), "phase": "x", "duration_seconds": 1, "bogus": 1})
    with pytest.raises(errors.UnknownEventType, match=r"no\.such"):
        store.registry.parse("no.such", {})
    for stream in ("Not A Stream", "run-x y", "run-x\n"):  # (`$` matched before a newline)
        with pytest.raises(errors.InvalidEvent, match="stream id"):
            await store.append(stream, [catalog.PhaseCompleted(
                run_id=uuid.uuid4(), phase="x", duration_seconds=1)])
    assert await count(store) == 0


async def test_over_large_payload_is_refused(store: EventStore, new_event: Make) -> None:
    # Past the catalog's bounds too (100 locations at most): built without validation, as a
    # writer that skipped the catalog would, so the store's own size check is what refuses.
    big = catalog.IssueReported.model_construct(
        run_id=uuid.uuid4(), issue_id="i", rationale="x" * 20_000, severity=None,
        locations=[catalog.Location(file="f" * 1000)] * (MAX_EVENT_BYTES // 1000))
    with pytest.raises(errors.PayloadTooLarge, match="put_blob"):
        await store.append("run-e", [new_event(), big])
    assert await count(store) == 0


async def test_unregistered_type_cannot_be_appended(store: EventStore) -> None:
    class Stray(Event):
        type_name: ClassVar[str] = "stray.thing"
        x: int

    with pytest.raises(errors.UnknownEventType, match=r"stray\.thing"):
        await store.append("run-f", [Stray(x=1)])


async def test_unknown_stored_type_reads_as_raw_event(store: EventStore, new_event: Make) -> None:
    await store.append("run-g", [new_event()])
    await store.pool.execute(
        "INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version,"
        " data) VALUES (gen_random_uuid(), 'run-g', 2, 'from.the.future', 1, '{\"k\": [1]}')")
    got = await store.read_all()
    assert isinstance(got[1].event, UnknownEvent)
    assert got[1].event.type_name == "from.the.future" and got[1].event.data == {"k": [1]}


async def test_newer_schema_version_is_a_clear_error(store: EventStore) -> None:
    await store.pool.execute(
        "INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version,"
        " data) VALUES (gen_random_uuid(), 'run-h', 1, 'phase.completed', 9, '{}')")
    # Reading never fails on one event: it comes as unreadable, saying why, for its
    # consumer to park (tests/test_parking.py).
    [rec] = await store.read_all()
    assert isinstance(rec.event, UnreadableEvent) and "upgrade props" in rec.event.problem


def test_upcasting_brings_old_versions_to_the_current_model() -> None:
    registry = EventRegistry()

    @registry.register
    class Renamed(Event):
        type_name: ClassVar[str] = "test.renamed"
        schema_version: ClassVar[int] = 3
        title: str
        words: int

    @registry.upcaster("test.renamed", 1)
    def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
        return {"title": data["name"]}

    @registry.upcaster("test.renamed", 2)
    def v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "words": len(data["title"].split())}

    registry.check_complete()
    assert registry.decode("test.renamed", 1, '{"name": "a b"}') == Renamed(title="a b", words=2)
    assert registry.decode("test.renamed", 3, '{"title": "c", "words": 1}') == Renamed(
        title="c", words=1)

    broken = EventRegistry()

    @broken.register
    class Gap(Event):
        type_name: ClassVar[str] = "test.gap"
        schema_version: ClassVar[int] = 2

    with pytest.raises(ValueError, match="no upcaster"):
        broken.check_complete()
    with pytest.raises(errors.EventVersionError, match="no upcaster"):
        broken.decode("test.gap", 1, "{}")


def test_every_catalog_type_is_registered_and_versioned() -> None:
    names = catalog.REGISTRY.names()
    for required in ["run.requested", "run.started", "run.finished", "container.started",
                     "container.exited", "prompt.composed", "llm.requested", "llm.responded",
                     "phase.completed", "issue.reported", "grade.emitted", "definition.pushed",
                     "snapshot.synced", "scorer.registered", "event.parked", "run.claimed",
                     "launcher.started"]:
        assert required in names
    catalog.REGISTRY.check_complete()


def test_the_catalog_checks_completeness_after_its_last_registration() -> None:
    """The check once ran before the last types registered, so they went unchecked: it must
    stand after every `@REGISTRY.register` (the check itself failing on a gap is shown by
    the broken registry above)."""
    import ast
    import importlib
    import inspect

    # The package's modules in the order it imports them, then the package itself: one
    # source, so "after" means after every module's registrations.
    modules = [importlib.import_module(f"{catalog.__name__}.{name}")
               for name in ("parts", "snapshots", "runs", "grading", "operations",
                            "verification", "gateway")]
    tree = ast.parse("\n".join(inspect.getsource(m) for m in [*modules, catalog]))
    registered = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                  for d in node.decorator_list if ast.unparse(d) == "REGISTRY.register"]
    checks = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
              and ast.unparse(node.func) == "REGISTRY.check_complete"]
    assert len(registered) == len(catalog.REGISTRY.names()) and len(checks) == 1
    assert checks[0] > max(registered)


def test_catalog_refuses_inconsistent_facts() -> None:
    run = uuid.uuid4()
    with pytest.raises(pydantic.ValidationError, match="must say how it failed"):
        catalog.RunFinished(run_id=run, status="failed")
    with pytest.raises(pydantic.ValidationError, match="ends"):
        catalog.LineRange(start=5, end=4)
    with pytest.raises(pydantic.ValidationError, match="not both"):
        catalog.GradeEmitted(
            critique_run_id=run, critique_issue_id="i", tp_id="t", fp_id="f", grade=1,
            scorer=catalog.ScorerRef(name="s", version=1, code_hash="0" * 64,
                                     ground_truth_hash="1" * 64))


async def test_database_refuses_a_gap_from_any_writer(store: EventStore, new_event: Make) -> None:
    await store.append("run-i", [new_event()])
    insert = ("INSERT INTO props.events (event_id, stream_id, stream_version, type, "
              "schema_version, data) VALUES (gen_random_uuid(), 'run-i', $1, 'phase.completed',"
              " 1, '{}')")
    with pytest.raises(Exception, match="dense") as info:
        await store.pool.execute(insert, 3)
    assert getattr(info.value, "sqlstate", None) == "PX409"
    await store.pool.execute(insert, 2)  # control: the next version is accepted
    assert await store.stream_version("run-i") == 2


@pytest.mark.parametrize("versions", [(2,), (3,), (1,), (2, 4)])  # next, gap, taken, not dense
async def test_a_repeated_event_id_is_refused_before_the_stream_order(
        store: EventStore, new_event: Make, versions: tuple[int, ...]) -> None:
    """A statement that repeats a stored event id is a duplicate whatever its versions: the
    id is checked first (migration 0019 writes a stream's ids and head in one statement and
    keeps that order). The store reads the duplicate as a retry; an out-of-order refusal
    instead would send it racing for versions."""
    stored = NewEvent(new_event())
    await store.append("run-k", [stored])
    ids = [stored.event_id] + [uuid.uuid4() for _ in versions[1:]]
    insert = ("INSERT INTO props.events (event_id, stream_id, stream_version, type, "
              "schema_version, data) SELECT i, 'run-k', v, 'phase.completed', 1, '{}' "
              "FROM unnest($1::uuid[], $2::integer[]) AS u(i, v)")
    with pytest.raises(asyncpg.UniqueViolationError):
        await store.pool.execute(insert, ids, list(versions))
    if versions == (2,):  # control: a new id at the next version is accepted
        await store.pool.execute(insert, [uuid.uuid4()], [2])
        assert await store.stream_version("run-k") == 2


async def test_transaction_appends_commit_together(store: EventStore, new_event: Make) -> None:
    async with store.transaction() as tx:
        await tx.append("run-j", [new_event()])
        await tx.append("run-k", [new_event(), new_event()])
        with pytest.raises(errors.ConcurrencyConflict):
            await tx.append("run-j", [new_event()], expected_version=5)
        await tx.append("run-j", [new_event()], expected_version=1)  # still usable
    assert (await store.stream_version("run-j"), await store.stream_version("run-k")) == (2, 2)

    with pytest.raises(RuntimeError):
        async with store.transaction() as tx:
            await tx.append("run-l", [new_event()])
            raise RuntimeError("abort")
    assert await store.stream_version("run-l") == 0


async def test_a_refusal_inside_a_transaction_is_explained_as_the_transaction_sees_it(
        store: EventStore, new_event: Make) -> None:
    """The explanation of an append that wrote nothing is read on the transaction's own
    connection: what the transaction wrote (uncommitted) is what the pool cannot see. Read
    on the pool, a retried append inside the transaction was a concurrent writer's win and
    a version conflict named version 0."""
    first = NewEvent(new_event(), uuid.uuid4())
    async with store.transaction() as tx:
        await tx.append("run-t", [first])
        again = await tx.append("run-t", [first])  # a retry of the same ids
        assert again.already_stored and again.last_version == 1
        with pytest.raises(errors.ConcurrencyConflict) as conflict:
            await tx.append("run-t", [new_event()], expected_version=0)
        assert conflict.value.actual == 1
    assert await store.stream_version("run-t") == 1


async def test_blobs_are_content_addressed_and_compressed(store: EventStore) -> None:
    data = b"transcript line\n" * 10_000  # over the threaded size, very compressible
    sha = await store.put_blob(data)
    assert sha == __import__("hashlib").sha256(data).hexdigest()
    assert await store.put_blob(data) == sha  # stored once
    row = await store.pool.fetchrow("SELECT count(*) AS n, max(octet_length(content)) AS size, "
                                    "max(compression) AS c FROM props.blobs")
    assert row is not None and row["n"] == 1 and row["c"] == "zstd"
    assert row["size"] < len(data) // 20
    assert await store.get_blob(sha) == data
    assert await store.get_blob(await store.put_blob(b"")) == b""
    with pytest.raises(errors.BlobNotFound):
        await store.get_blob("0" * 64)
    with pytest.raises(errors.BlobNotFound, match="not a sha256"):
        await store.get_blob("nope")


async def test_corrupt_blob_is_detected(store: EventStore) -> None:
    sha = await store.put_blob(b"a" * 1000)
    await store.pool.execute("ALTER TABLE props.blobs DISABLE TRIGGER blobs_append_only")
    await store.pool.execute("UPDATE props.blobs SET content = '\\x00'::bytea")
    with pytest.raises(errors.CorruptBlob, match=sha):
        await store.get_blob(sha)


async def test_checkpoints_compare_and_set(store: EventStore) -> None:
    assert await store.load_checkpoint("proj") == START
    first = Checkpoint(10, 3)
    await store.save_checkpoint("proj", START, first)
    with pytest.raises(errors.CheckpointConflict, match="another consumer"):
        await store.save_checkpoint("proj", START, Checkpoint(11, 4))
    await store.save_checkpoint("proj", first, Checkpoint(12, 5))
    with pytest.raises(errors.CheckpointConflict):
        await store.save_checkpoint("proj", first, Checkpoint(13, 6))
    assert await store.load_checkpoint("proj") == Checkpoint(12, 5)
    with pytest.raises(errors.CheckpointConflict):  # moving one that does not exist
        await store.save_checkpoint("other", first, Checkpoint(13, 6))


async def test_dead_database_is_a_clear_error() -> None:
    with pytest.raises(errors.StoreUnavailable, match="cannot reach PostgreSQL") as info:
        async with open_store("postgresql://nobody:secret@127.0.0.1:1/x"):
            pass
    assert "secret" not in str(info.value)
    assert info.value.exit_code == 69


async def test_append_many_is_atomic_and_idempotent_per_stream(
    store: EventStore, new_event: Make
) -> None:
    await store.append("run-m1", [new_event()])
    batches = [("run-m1", [NewEvent(new_event(f"a{i}")) for i in range(3)]),
               ("run-m2", [NewEvent(new_event("b"))])]
    first = await store.append_many(batches)
    assert [(r.first_version, r.last_version, r.already_stored) for r in first] == [
        (2, 4, False), (1, 1, False)]
    again = await store.append_many([*batches, ("run-m3", [NewEvent(new_event("c"))])])
    assert [r.already_stored for r in again] == [True, True, False]
    assert await count(store) == 6
    partly = [("run-m4", [batches[1][1][0], NewEvent(new_event("d"))])]
    with pytest.raises(errors.DuplicateEventConflict):
        await store.append_many(partly)
    assert await count(store) == 6


async def test_a_bulk_load_is_analyzed_before_a_filtered_read(
        store: EventStore, new_event: Make) -> None:
    """Without statistics the planner reads a filtered catch-up by bitmap scan and sort, page
    after page; the store analyzes partitions a bulk load left stale, once."""
    assert await store.analyze_stale_partitions() == []  # control: nothing loaded, nothing due
    await store.append_many([(f"run-{i}", [new_event(f"p{j}") for j in range(100)])
                             for i in range(30)])
    stale: list[str] = []
    with anyio.fail_after(30):  # the server publishes its row counts within a second or so
        while not stale:
            await anyio.sleep(0.2)
            stale = await store.analyze_stale_partitions()
    assert all(name.startswith("props.events_") for name in stale)
    assert await store.analyze_stale_partitions() == []  # analyzed: not again
    async for _ in store.iter_all(types=["phase.completed"]):  # a filtered read still works
        pass


async def test_a_refused_change_to_the_log_raises_append_only_violation(
        store: EventStore, new_event: Callable[..., object]) -> None:
    """The log's triggers answer PX001; the store says it by name, and the CLI exits 77
    (EX_NOPERM) on it, as docs/reference/exit-codes.md says."""
    from props.tools import cli

    await store.append("run-x", [new_event()])  # type: ignore[list-item]
    with pytest.raises(errors.AppendOnlyViolation, match="append-only") as refused:
        async with store.transaction() as tx:
            await tx.conn.execute("UPDATE props.events SET type = 'forged'")
    cause = refused.value.__cause__
    assert cause is not None and errors.sqlstate(cause) == errors.APPEND_ONLY
    assert await store.pool.fetchval("SELECT count(*) FROM props.events "
                                     "WHERE type = 'forged'") == 0
    with pytest.raises(Exception) as raw:  # the driver's own error, from a raw statement
        await store.pool.execute("DELETE FROM props.events")
    assert cli._exit_for(refused.value) == cli._exit_for(raw.value) == 77
    # Negative control: a refusal of another kind is not called a change to the log.
    with pytest.raises(Exception) as other:
        await store.pool.execute("SELECT 1/0")
    assert errors.translate(other.value) is other.value


_MANY = ("INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, "
         "data) SELECT gen_random_uuid(), s, v, 'phase.completed', 1, '{}' "
         "FROM unnest($1::text[], $2::int[]) AS x(s, v)")


@pytest.mark.parametrize(("streams", "versions", "named"), [
    (["run-m1", "run-m2", "run-m3"], [2, 2, 2], "run-m3"),  # m3 is at 2 already
    (["run-m1", "run-m2", "run-m9"], [2, 3, 1], "run-m2"),  # m2 skips version 2
    (["run-m1", "run-m2", "run-m9"], [2, 1, 1], "run-m2"),  # a new m2: it exists
    (["run-m1", "run-m1", "run-m9"], [2, 4, 1], "run-m1"),  # m1 not dense in itself
])
async def test_one_statement_over_many_streams_keeps_each_dense(
        store: EventStore, streams: list[str], versions: list[int], named: str) -> None:
    """The append trigger checks the streams of a statement together (set-based since
    migration 0017): one stream out of order refuses the statement, named, nothing written."""
    await store.pool.execute(_MANY, ["run-m1", "run-m2", "run-m3", "run-m3"], [1, 1, 1, 2])
    before = await count(store)
    with pytest.raises(Exception, match=f"stream {named} would not stay dense") as refused:
        await store.pool.execute(_MANY, streams, versions)
    assert errors.sqlstate(refused.value) == errors.STREAM_MOVED
    assert await count(store) == before
    # Negative control: the same streams each at their next version are taken together.
    await store.pool.execute(_MANY, ["run-m1", "run-m2", "run-m3", "run-m9"], [2, 2, 3, 1])
    assert await store.pool.fetchval(
        "SELECT array_agg(version ORDER BY stream_id) FROM props.streams "
        "WHERE stream_id LIKE 'run-m_'") == [2, 2, 3, 1]

"""What an import brings adds; it never changes what is this database's own.

Each hostile file (tests/hostile_imports.py) is refused naming its line, with nothing written,
or kept as inert history when the operator asks; an honest file of new streams is taken
(the control). A snapshot version an import brings never grades a run of the target's own
unless adopted; `--as-of TIME` names what this database had recorded by then, whatever
times imported events carry; the service cannot mark a transaction as an import; a key's
line 2^31-1 does not stop the overlap statement.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from props.core.domain import catalog, exports, imports, specimen_sync
from props.core.log.store import EventStore
from props.core.scoring import rescoring, scorers, server_grading
from props.projections import as_of, engine
from props.tools.checks.workload import Workload
from tests import hostile_imports
from tests.conftest import fence_clear
from tests.hostile_imports import KINDS, Local


@pytest.fixture
async def target(store: EventStore) -> EventStore:
    w = Workload(7)
    await w.setup(store)
    await w.append_runs(store, 6)
    return store


@pytest.fixture
async def template(target: EventStore, tmp_path: Path) -> Path:
    out = tmp_path / "template.jsonl.zst"
    await exports.export(target, exports.Selection(categories=("definition",)), out)
    return out


async def local(store: EventStore) -> Local:
    grade = await one(store,
        "SELECT g.stream_id, g.event_id, g.global_position, g.data::text AS data, "
        "       r.stream_id AS run_stream, "
        "       (SELECT version FROM props.streams s WHERE s.stream_id = r.stream_id) AS head "
        "  FROM props.events g JOIN props.events r "
        "    ON r.stream_id = 'run-' || (g.data->>'critique_run_id') AND r.stream_version = 1 "
        " WHERE g.type = 'grade.emitted' ORDER BY g.global_position LIMIT 1")
    return Local(run_id=grade["run_stream"].removeprefix("run-"), run_head=grade["head"],
                 grade_stream=grade["stream_id"], grade_data=orjson.loads(grade["data"]),
                 grade_event_id=str(grade["event_id"]),
                 grade_position=grade["global_position"])


async def one(store: EventStore, query: str, *args: object) -> Any:
    row = await store.pool.fetchrow(query, *args)
    assert row is not None, query
    return row


async def count(store: EventStore) -> int:
    n: int = await store.pool.fetchval("SELECT count(*) FROM props.events")
    return n


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_file_that_acts_on_this_database_is_refused_naming_the_line(
        target: EventStore, template: Path, tmp_path: Path, kind: str) -> None:
    """Negative control: on the code before this check every one of these files imported
    (the probe's parks, exclusions and activations took effect after a rebuild)."""
    make, reason = KINDS[kind]
    events = make(await local(target))
    bad = hostile_imports.write(tmp_path / "hostile.jsonl.zst", template, events)
    exports.verify(bad)  # intact: integrity alone cannot tell
    before = await count(target)
    with pytest.raises(exports.ArchiveError,
                       match=rf"hostile.jsonl.zst:2: {events[0]['type']} in .*{reason}.*"
                             r"nothing was written") as refused:
        await imports.import_archive(target, bad)
    assert "\n" not in str(refused.value)
    assert await count(target) == before
    # With the operator's --inert: kept as history, in a stream of the import's own, and the
    # event itself is not in the log (nothing folds or handles it).
    report = await imports.import_archive(target, bad, inert=True)
    assert (report.imported, report.inert) == (0, 1)
    assert await target.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE event_id = $1::uuid",
        events[0]["event_id"]) == 0
    kept = await one(target,
        "SELECT stream_id, data FROM props.events WHERE type = 'import.inert'")
    assert kept["stream_id"].startswith("inert-")
    assert orjson.loads(kept["data"])["event"]["event_id"] == events[0]["event_id"]
    again = await imports.import_archive(target, bad, inert=True)
    assert (again.imported, again.inert) == (0, 0)


async def test_new_streams_whole_are_taken(target: EventStore, template: Path,
                                           tmp_path: Path) -> None:
    """The control of the family above: a run of the file's own, whole, imports."""
    run = str(uuid.uuid4())
    events = [hostile_imports._event(f"run-{run}", 1, "run.cancel_requested",
                                     {"run_id": run, "requested_by": "them"}, 1),
              hostile_imports._event(f"grading-{run}-overlap@1", 1, "grade.emitted", {
                  **(await local(target)).grade_data, "critique_run_id": run}, 2)]
    honest = hostile_imports.write(tmp_path / "honest.jsonl.zst", template, events)
    report = await imports.import_archive(target, honest)
    assert (report.imported, report.inert) == (2, 0)


async def test_an_imported_snapshot_version_never_grades_a_local_run(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """The backdating case: a version dated between v1 and the local runs on it passes the
    backdating check, but grades only the runs the file brings, unless adopted."""
    run = await one(target,
        "SELECT data->'example'->>'snapshot' AS slug, recorded_at FROM props.events "
        "WHERE type = 'run.requested' ORDER BY global_position LIMIT 1")
    v1 = await one(target,
        "SELECT event_id, stream_id, data::text AS data, recorded_at FROM props.events "
        "WHERE stream_id = $1 ORDER BY stream_version DESC LIMIT 1", f"snapshot-{run['slug']}")
    head = await target.pool.fetchval("SELECT version FROM props.streams WHERE stream_id = $1",
                                      v1["stream_id"])
    data = orjson.loads(v1["data"])
    between = v1["recorded_at"] + (run["recorded_at"] - v1["recorded_at"]) / 2
    forged = {**hostile_imports._event(v1["stream_id"], head + 1, "snapshot.synced",
                                       {**data, "version": data["version"] + 1}, 1),
              "recorded_at": between.isoformat()}
    path = hostile_imports.write(tmp_path / "backdated.jsonl.zst", template, [forged])
    assert (await imports.import_archive(target, path)).imported == 1
    history = await specimen_sync.history_of(target, run["slug"])
    assert history is not None and history.foreign == [False] * (len(history.versions) - 1) \
        + [True]
    record = rescoring.RunRecord(uuid.uuid4(), "completed", run["slug"], "",
                                 run["recorded_at"], "m", "d")
    chosen = rescoring.ground_truth_for(record, {run["slug"]: history}, "at-run")
    assert chosen is not None and chosen.version == data["version"]
    latest = rescoring.ground_truth_for(record, {run["slug"]: history}, "latest")
    assert latest is not None and latest.version == data["version"]
    # Negative control: the same version graded a run the file brought (the old rule, for
    # every run): the forged key.
    record.imported = True
    chosen = rescoring.ground_truth_for(record, {run["slug"]: history}, "at-run")
    assert chosen is not None and chosen.version == data["version"] + 1


async def test_as_of_a_time_never_moves_when_older_events_are_imported(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """Negative control: the old rule (the event's own time) names the imported event."""
    await fence_clear(target)
    now = datetime.now(UTC)
    async with target.sql.acquire() as conn:
        before = await as_of.resolve(conn, now.isoformat())
    run = str(uuid.uuid4())
    old = hostile_imports.write(tmp_path / "old.jsonl.zst", template, [hostile_imports._event(
        f"run-{run}", 1, "run.cancel_requested", {"run_id": run}, 1)])
    assert (await imports.import_archive(target, old)).imported == 1
    await fence_clear(target)
    async with target.sql.acquire() as conn:
        assert await as_of.resolve(conn, now.isoformat()) == before
        later = await as_of.resolve(conn, (datetime.now(UTC) + timedelta(seconds=1)).isoformat())
    assert later != before
    naive = await target.pool.fetchval(
        "SELECT global_position FROM props.events WHERE recorded_at <= $1 "
        "ORDER BY tx_id DESC, global_position DESC LIMIT 1", now)
    assert naive != before.position


async def test_the_service_cannot_mark_an_import_nor_backdate_a_row(store: EventStore) -> None:
    async with store.sql.acquire() as conn:
        assert await conn.fetchval("SELECT to_regprocedure('props.mark_import()')") is None
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE props_service")
            assert not await conn.fetchval(
                "SELECT has_function_privilege('props.import_staged(jsonb, boolean)', "
                "'EXECUTE')")
            assert not await conn.fetchval(
                "SELECT has_table_privilege('props.importing', 'INSERT')")
        with pytest.raises(Exception, match="the log sets tx_id, recorded_at"):
            async with conn.transaction():
                await conn.execute("SET LOCAL ROLE props_service")
                await conn.execute(
                    "INSERT INTO props.events (event_id, stream_id, stream_version, type, "
                    "schema_version, data, recorded_at) VALUES (gen_random_uuid(), 'x-1', 1, "
                    "'t', 1, '{}', '2000-01-01')")


async def test_a_key_line_at_the_integer_limit_does_not_stop_the_overlap_statement(
        target: EventStore) -> None:
    """An imported key whose range ends at 2^31-1, widened by overlap@2's tolerance, once
    overflowed the statement for every run graded with it (negative control below)."""
    row = await one(target,
        "SELECT r.data->>'run_id' AS run, r.data->'example'->>'snapshot' AS slug "
        "  FROM props.events r JOIN props.events i ON i.stream_id = r.stream_id "
        " WHERE r.type = 'run.requested' AND i.type = 'issue.reported' "
        " ORDER BY r.global_position LIMIT 1")
    await fence_clear(target)
    await engine.rebuild(target)
    history = await specimen_sync.history_of(target, row["slug"])
    assert history is not None
    snap = _with_last_line(history.latest)
    s = scorers.scorer("overlap@2")
    assert isinstance(s, scorers.OverlapScorer) and s.tolerance > 0
    run = uuid.UUID(row["run"])
    ranges, _ = server_grading._truth([snap], 0)  # unbounded: the old statement's input
    # The statement's widening of the key, on the old input and on the bounded one.
    widen = "SELECT max((t->>7)::int + $2::int) FROM jsonb_array_elements($1::jsonb) t"
    with pytest.raises(Exception, match="out of range"):
        await target.pool.fetchval(widen, ranges, s.tolerance)
    bounded, _ = server_grading._truth([snap], s.tolerance)
    assert await target.pool.fetchval(widen, bounded, s.tolerance) == 2**31 - 1
    graded = await server_grading.grade(target, s, [(run, snap)], dry_run=False)
    assert not graded.malformed and graded.grades > 0


def _with_last_line(snap: catalog.SnapshotSynced) -> catalog.SnapshotSynced:
    data: dict[str, Any] = snap.model_dump(mode="json")
    for tp in data["ground_truth"]["true_positives"]:
        tp["occurrences"][0]["locations"][0]["ranges"][0]["end"] = 2**31 - 1
    return catalog.SnapshotSynced.model_validate(data)


async def test_an_imported_unfinished_run_is_never_carried_out_here(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """A file may bring a run that never finished where it came from: it is that database's
    history. No launcher here queues it, claims it or starts its container. Control: the
    same request appended here is queued and claimed."""
    from props.reactors.launcher import Launcher
    from props.reactors.local_runtime import LocalRuntime
    from props.schema import queries

    requested = await one(target, "SELECT data::text AS data FROM props.events "
                                  "WHERE type = 'run.requested' LIMIT 1")
    theirs, ours = uuid.uuid4(), uuid.uuid4()
    data = {**orjson.loads(requested["data"]), "run_id": str(theirs)}
    brought = hostile_imports.write(tmp_path / "unfinished.jsonl.zst", template, [
        hostile_imports._event(f"run-{theirs}", 1, "run.requested", data, 1)])
    assert (await imports.import_archive(target, brought)).imported == 1
    await target.append(f"run-{ours}", [catalog.RunRequested.model_validate(
        {**data, "run_id": str(ours)})])
    queued = {r["stream_id"] for r in
              await target.sql.fetch(queries.load("agents")["unfinished_runs"])}
    assert f"run-{ours}" in queued and f"run-{theirs}" not in queued
    launcher = Launcher(target, [LocalRuntime(tmp_path / "c")], tmp_path / "work")
    await launcher._run(theirs)
    assert await target.stream_version(f"run-{theirs}") == 1  # nothing appended: not claimed

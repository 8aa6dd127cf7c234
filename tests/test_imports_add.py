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

from props.core.domain import catalog
from props.core.domain.archive import exports, imports
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers, server_grading
from props.projections import as_of, engine
from props.tools.checks.workload import Workload
from props.tools.command_line.handlers.events import parse_new_events
from tests import hostile_imports
from tests.conftest import fence_clear
from tests.hostile_imports import KINDS, ORIGINS_CONSUMERS, Local


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


@pytest.mark.parametrize("kind", sorted(ORIGINS_CONSUMERS))
async def test_the_origin_s_consumers_records_are_history_that_acts_on_nothing(
        target: EventStore, template: Path, tmp_path: Path, kind: str) -> None:
    """A whole-log export carries its origin's parks, retries and activation: the file is
    taken without --inert (issue 55: the demo's own export was refused), and none of them
    acts here. Parks and retries are kept as import.inert; an activation stays in its
    stream, readable, while the active scorer (read now and folded by a rebuild) stays this
    database's. Negative control: the same activation appended here does switch both."""
    make, kept = ORIGINS_CONSUMERS[kind]
    events = make(await local(target))
    theirs = hostile_imports.write(tmp_path / "theirs.jsonl.zst", template, events)
    await registration.activate(target, "overlap", 1)
    report = await imports.import_archive(target, theirs)
    assert report.history == ({kind: 1} if kept == "history" else {})
    assert report.kept_inert == ({kind: 1} if kept == "inert" else {})
    in_log = await target.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE event_id = $1::uuid", events[0]["event_id"])
    assert in_log == (1 if kept == "history" else 0)
    await fence_clear(target)
    await engine.rebuild(target, engine.ALL)
    assert await registration.active_scorer(target) == "overlap@1"
    folded = await target.pool.fetchval(
        "SELECT name || '@' || version FROM projections.active_scorer")
    assert folded == "overlap@1"
    if kind == "scorer.activated":  # the control: the same activation of this database's
        await registration.activate(target, "overlap", 2)
        await fence_clear(target)
        await engine.rebuild(target, engine.ALL)
        assert await registration.active_scorer(target) == "overlap@2"
        assert await target.pool.fetchval(
            "SELECT name || '@' || version FROM projections.active_scorer") == "overlap@2"


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


async def _local_snapshot(target: EventStore) -> tuple[Any, Any, int, dict[str, Any]]:
    """The first run's request, its snapshot's last version, that stream's head and data."""
    run = await one(target,
        "SELECT data->'example'->>'snapshot' AS slug, recorded_at FROM props.events "
        "WHERE type = 'run.requested' ORDER BY global_position LIMIT 1")
    v1 = await one(target,
        "SELECT event_id, stream_id, data::text AS data, recorded_at FROM props.events "
        "WHERE stream_id = $1 ORDER BY stream_version DESC LIMIT 1", f"snapshot-{run['slug']}")
    head = await target.pool.fetchval("SELECT version FROM props.streams WHERE stream_id = $1",
                                      v1["stream_id"])
    return run, v1, head, orjson.loads(v1["data"])


async def test_a_snapshot_version_appended_to_a_local_snapshot_is_refused(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """A new version of a snapshot this database synced amends its ground truth: refused
    naming the line, nothing written. Negative control: on the code before, the same file
    imported (1 event; only the grading rule below kept it off local runs)."""
    run, v1, head, data = await _local_snapshot(target)
    between = v1["recorded_at"] + (run["recorded_at"] - v1["recorded_at"]) / 2
    forged = {**hostile_imports._event(v1["stream_id"], head + 1, "snapshot.synced",
                                       {**data, "version": data["version"] + 1}, 1),
              "recorded_at": between.isoformat()}
    path = hostile_imports.write(tmp_path / "amend.jsonl.zst", template, [forged])
    before = await count(target)
    with pytest.raises(exports.ArchiveError, match=r"amend.jsonl.zst:2: snapshot.synced in "
                       r"snapshot-.* appends to a stream holding events of this database"):
        await imports.import_archive(target, path)
    with pytest.raises(exports.ArchiveError, match="appends to a stream"):
        await imports.import_archive(target, path, adopt_snapshots=True)
    assert await count(target) == before


async def test_an_imported_snapshot_version_never_grades_a_local_run(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """The backdating case, on a snapshot an import brought (adopted: its version 1 grades
    local runs): a later file's version dated between v1 and the local runs on it passes the
    backdating check, but grades only the runs the file brings, unless adopted."""
    run, v1, _, data = await _local_snapshot(target)
    slug = data["slug"].rsplit("-", 1)[0] + "-99"
    data = {**data, "slug": slug, "version": 1}
    first = {**hostile_imports._event(f"snapshot-{slug}", 1, "snapshot.synced", data, 1),
             "recorded_at": v1["recorded_at"].isoformat()}
    adopted = hostile_imports.write(tmp_path / "adopted.jsonl.zst", template, [first])
    assert (await imports.import_archive(target, adopted, adopt_snapshots=True)).imported == 1
    between = v1["recorded_at"] + (run["recorded_at"] - v1["recorded_at"]) / 2
    forged = {**hostile_imports._event(f"snapshot-{slug}", 2, "snapshot.synced",
                                       {**data, "version": 2}, 2),
              "recorded_at": between.isoformat()}
    path = hostile_imports.write(tmp_path / "backdated.jsonl.zst", template, [forged])
    assert (await imports.import_archive(target, path)).imported == 1
    history = await specimen_sync.history_of(target, slug)
    assert history is not None and history.foreign == [False, True]
    record = rescoring.RunRecord(uuid.uuid4(), "completed", slug, "",
                                 run["recorded_at"], "m", "d")
    chosen = rescoring.ground_truth_for(record, {slug: history}, "at-run")
    assert chosen is not None and chosen.version == 1
    latest = rescoring.ground_truth_for(record, {slug: history}, "latest")
    assert latest is not None and latest.version == 1
    # Negative control: the same version graded a run the file brought (the old rule, for
    # every run): the forged key.
    record.imported = True
    chosen = rescoring.ground_truth_for(record, {slug: history}, "at-run")
    assert chosen is not None and chosen.version == 2


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
    from props.reactors.launcher.launcher import Launcher
    from props.reactors.runtimes.local_runtime import LocalRuntime
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


def _spellings(run_id: str) -> dict[str, str]:
    """Other spellings of one id that uuid parsers (Python's, PostgreSQL's) read as it."""
    return {"upper": run_id.upper(), "braced": "{" + run_id + "}",
            "no hyphens": run_id.replace("-", "")}


@pytest.mark.parametrize("spelling", ["upper", "braced", "no hyphens"])
@pytest.mark.parametrize("where", ["data", "stream"])
async def test_an_id_in_another_spelling_is_refused_naming_the_line(
        target: EventStore, template: Path, tmp_path: Path, spelling: str, where: str) -> None:
    """A local run named in another spelling than props writes slipped past the checks
    that compared ids as text (negative control: on the code before, the braced and
    unhyphenated data and every stream spelling imported: `imported == 1`)."""
    mine = await local(target)
    other = _spellings(mine.run_id)[spelling]
    theirs = str(uuid.uuid4())
    if where == "data":  # a grade of a new stream, whose data names the local run
        stream, data = f"grading-{theirs}-overlap@9", {**mine.grade_data,
                                                         "critique_run_id": other}
    else:  # a grade of a new run, in a stream named after the local run
        stream, data = f"grading-{other}-overlap@9", {**mine.grade_data,
                                                      "critique_run_id": theirs}
    event = hostile_imports._event(stream, 1, "grade.emitted", data, 1)
    bad = hostile_imports.write(tmp_path / "spelled.jsonl.zst", template, [event])
    before = await count(target)
    with pytest.raises(exports.ArchiveError,
                       match=r"spelled.jsonl.zst:2: .* is not a UUID as props writes it "
                             r"\(lower case, 8-4-4-4-12\); nothing was written"):
        await imports.import_archive(target, bad)
    assert await count(target) == before


@pytest.mark.parametrize("spelling", ["upper", "braced", "no hyphens"])
async def test_the_database_compares_run_ids_as_uuids(
        target: EventStore, template: Path, tmp_path: Path, spelling: str) -> None:
    """The function that decides what a file may bring compares uuids, whatever the
    verifier let through: an event of a type this props does not know (taken as it is with
    --allow-unknown, its data unread) naming a local run in another spelling is refused.
    Negative control: 0011's function compared text, and took the braced and unhyphenated
    spellings."""
    mine = await local(target)
    event = hostile_imports._event(f"x-{uuid.uuid4()}", 1, "vendor.flagged",
                                   {"run_id": _spellings(mine.run_id)[spelling]}, 1)
    bad = hostile_imports.write(tmp_path / "unknown.jsonl.zst", template, [event])
    with pytest.raises(exports.ArchiveError, match=rf"unknown.jsonl.zst:2: vendor.flagged .*"
                       rf"names critic run {mine.run_id} of this database's own"):
        await imports.import_archive(target, bad, allow_unknown=True)


async def test_a_snapshot_whose_hash_is_not_its_ground_truth_s_is_refused(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """Grades cite a ground truth by its hash: a version claiming another's hash would
    have local grades counted against a key they never saw. Negative control: on the code
    before, the file verified intact and imported."""
    _, _, _, data = await _local_snapshot(target)
    slug = data["slug"].rsplit("-", 1)[0] + "-98"
    honest = {**data, "slug": slug, "version": 1}
    forged = {**honest, "ground_truth_hash": "f" * 64}
    for name, payload in (("forged", forged), ("honest", honest)):
        path = hostile_imports.write(tmp_path / f"{name}.jsonl.zst", template, [
            hostile_imports._event(f"snapshot-{slug}", 1, "snapshot.synced", payload, 1)])
        if name == "forged":
            with pytest.raises(exports.ArchiveError, match=r"forged.jsonl.zst:2: snapshot."
                               r"synced .* ground_truth_hash is not the hash of the ground "
                               r"truth it carries; nothing was written"):
                exports.verify(path)
        else:  # the control: the same version with its own hash imports
            assert (await imports.import_archive(target, path)).imported == 1


async def test_a_stream_with_a_local_event_is_closed_to_imports(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """An import began the stream, this database appended to it: no import appends to it
    again, whatever the type. Negative control: on the code before, only a stream whose
    first event was local was closed, and the third file imported."""
    run = str(uuid.uuid4())

    def cancel(version: int, by: str) -> Path:
        return hostile_imports.write(tmp_path / f"v{version}.jsonl.zst", template, [
            hostile_imports._event(f"run-{run}", version, "run.cancel_requested",
                                   {"run_id": run, "requested_by": by}, version)])

    assert (await imports.import_archive(target, cancel(1, "them"))).imported == 1
    assert (await imports.import_archive(target, cancel(2, "them"))).imported == 1  # control
    await target.append(f"run-{run}", [catalog.RunCancelRequested(run_id=uuid.UUID(run),
                                                                  requested_by="us")])
    before = await count(target)
    with pytest.raises(exports.ArchiveError, match=r"v4.jsonl.zst:2: run.cancel_requested in "
                       r"run-.* appends to a stream holding events of this database's own"):
        await imports.import_archive(target, cancel(4, "them"))
    assert await count(target) == before


async def test_a_stream_an_import_brought_is_continued_only_from_its_origin(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """A stream a signed file brought is not continued by an unsigned one (nor by another
    signer's). Control: the same signer's next file is taken. Negative control: on the code
    before, any file continued any stream an import brought."""
    from props.core.domain.archive import signing

    signing.create(tmp_path / "keys", "ours")
    signing.create(tmp_path / "keys", "theirs")
    ours, theirs = (signing.load_private(n, tmp_path / "keys") for n in ("ours", "theirs"))
    run = str(uuid.uuid4())

    def cancel(version: int, name: str, key: Any) -> Path:
        return hostile_imports.write(tmp_path / f"{name}.jsonl.zst", template, [
            hostile_imports._event(f"run-{run}", version, "run.cancel_requested",
                                   {"run_id": run, "requested_by": name}, version)],
                                     sign_with=key)

    assert (await imports.import_archive(target, cancel(1, "first", ours))).imported == 1
    before = await count(target)
    for name, key in (("unsigned", None), ("other", theirs)):
        with pytest.raises(exports.ArchiveError,
                           match=rf"{name}.jsonl.zst:2: run.cancel_requested in run-.* "
                                 rf"continues a stream an import of another origin"):
            await imports.import_archive(target, cancel(2, name, key))
        assert await count(target) == before
    assert (await imports.import_archive(target, cancel(2, "same", ours))).imported == 1


async def test_a_run_is_scored_under_one_version_when_two_hold_its_ground_truth(
        target: EventStore) -> None:
    """Two versions of a snapshot may hold one ground truth (a resync that changed files
    only, or an adopted import's): `run_scores` joined versions on the hash and counted
    each run graded against it once per version. Negative control: the view before this
    change gave the graded runs of that snapshot two rows per scorer."""
    slug = (await one(target,
        "SELECT r.data->'example'->>'snapshot' AS slug FROM props.events g "
        "  JOIN props.events r ON r.stream_id = 'run-' || (g.data->>'critique_run_id') "
        "   AND r.type = 'run.requested' WHERE g.type = 'grade.emitted' LIMIT 1"))["slug"]
    history = await specimen_sync.history_of(target, slug)
    assert history is not None
    again = history.latest.model_copy(update={"version": history.latest.version + 1})
    await fence_clear(target)
    await engine.rebuild(target)
    per_run = ("SELECT count(*) AS rows, count(DISTINCT (run_id, scorer_name, scorer_version)) "
               "AS runs FROM projections.run_scores")
    before = await one(target, per_run)
    assert before["rows"] == before["runs"] > 0
    await target.append(f"snapshot-{slug}", [again])
    await fence_clear(target)
    await engine.rebuild(target)
    after = await one(target, per_run)
    assert (after["rows"], after["runs"]) == (before["rows"], before["runs"])


@pytest.mark.parametrize("kind", ["snapshot.retired", "snapshot.synced"])
async def test_a_snapshot_event_outside_its_slug_s_stream_is_refused_naming_the_line(
        target: EventStore, template: Path, tmp_path: Path, kind: str) -> None:
    """The folds key a snapshot's events on data.slug: one in a new stream `snapshot-evil`
    naming a local slug retired that snapshot (or took over its ground truth) past the
    closed-stream rule. Refused naming the line, by the import and by `props events
    append`. Negative control: on the code before, both files imported (1 event each); the
    same events in their slug's own (new) stream import."""
    _, _, _, data = await _local_snapshot(target)
    payload: dict[str, Any] = ({"slug": data["slug"], "version": 1, "reason": "gone"}
                               if kind == "snapshot.retired" else {**data, "version": 1})
    stream = f"snapshot-evil{uuid.uuid4().hex[:8]}"
    path = hostile_imports.write(tmp_path / "misfiled.jsonl.zst", template, [
        hostile_imports._event(stream, 1, kind, payload, 1)])
    before = await count(target)
    with pytest.raises(exports.ArchiveError, match=rf"misfiled.jsonl.zst:2: {kind} in "
                       rf"{stream} is not in its slug's stream"):
        await imports.import_archive(target, path)
    assert await count(target) == before
    with pytest.raises(errors.InvalidEvent, match=f"a {kind} goes to the stream of its slug"):
        parse_new_events(target, {"stream": stream, "type": kind, "data": payload})
    slug = data["slug"].rsplit("-", 1)[0] + "-97"  # the control: its own slug's stream
    own = [{**data, "slug": slug, "version": 1}] + (
        [{"slug": slug, "version": 1, "reason": "gone"}] if kind == "snapshot.retired" else [])
    honest = hostile_imports.write(tmp_path / "honest.jsonl.zst", template, [
        hostile_imports._event(f"snapshot-{slug}", n, t, d, n) for n, (t, d) in
        enumerate(zip(["snapshot.synced", "snapshot.retired"], own, strict=False), start=1)])
    assert (await imports.import_archive(target, honest)).imported == len(own)
    parse_new_events(target, {"stream": f"snapshot-{slug}", "type": kind, "data": own[-1]})


async def test_a_deployment_that_trusts_a_signer_lets_no_untrusted_file_take_an_id(
        target: EventStore, template: Path, tmp_path: Path) -> None:
    """The squat (issue 54): an unsigned file first takes the id of a run that a trusted
    signer's export holds; that export is then refused whole and the run reads as the
    squatter's. Once the deployment trusts the signer (`props keys trust`), the unsigned file
    is refused (nothing written), or with `--untrusted` kept whole as inert history: no
    stream of its own; the signed file then brings the run. Negative control, the order the
    deployment trusted no one in: the squatter takes the id and the signed file is refused
    (`other_origin`), as docs/reference/imports.md says of what came before trust. An
    imported `signer.trusted` trusts no one here."""
    from props.core.domain.archive import signing, trust

    ours = signing.create(tmp_path / "keys", "ours")
    key = signing.load_private("ours", tmp_path / "keys")

    def finished(name: str, run: str, by: str, sign: bool) -> Path:
        return hostile_imports.write(tmp_path / f"{name}.jsonl.zst", template, [
            hostile_imports._event(f"run-{run}", 1, "run.cancel_requested",
                                   {"run_id": run, "requested_by": by}, 1)],
                                     sign_with=key if sign else None)

    # What an import brings of trust is history: it trusts no one here.
    theirs = signing.create(tmp_path / "keys", "theirs")
    forged = hostile_imports.write(tmp_path / "trust.jsonl.zst", template, [
        hostile_imports._event("signers-trusted", 1, "signer.trusted",
                               {"fingerprint": theirs.fingerprint, "name": "theirs"}, 1)],
                                   sign_with=key)
    assert (await imports.import_archive(target, forged)).imported == 1
    assert await trust.trusted(target) == []

    # The negative control: a deployment that trusts no one.
    run = str(uuid.uuid4())
    assert (await imports.import_archive(target, finished("s1", run, "squatter", False))
            ).trust == "open"
    with pytest.raises(exports.ArchiveError, match="continues a stream an import of another"):
        await imports.import_archive(target, finished("t1", run, "trusted", True))

    assert await trust.trust(target, ours, actor="test")
    assert not await trust.trust(target, ours, actor="test")  # once is enough
    run = str(uuid.uuid4())
    before = await count(target)
    with pytest.raises(signing.SignatureError, match=r"not signed, and this deployment trusts "
                       rf"only files signed by ours \({ours.fingerprint}\)"):
        await imports.import_archive(target, finished("s2", run, "squatter", False))
    assert await count(target) == before
    kept = await imports.import_archive(target, finished("s3", run, "squatter", False),
                                        untrusted=True)
    assert (kept.trust, kept.imported, kept.inert) == ("untrusted", 0, 1)
    assert not await target.read_stream(f"run-{run}")
    taken = await imports.import_archive(target, finished("t2", run, "trusted", True))
    assert (taken.trust, taken.imported) == ("trusted", 1)
    [rec] = await target.read_stream(f"run-{run}")
    assert isinstance(rec.event, catalog.RunCancelRequested)
    assert rec.event.requested_by == "trusted"
    assert [s.fingerprint for s in await trust.trusted(target)] == [ours.fingerprint]

    assert await trust.distrust(target, ours.fingerprint, actor="test")
    assert await trust.trusted(target) == []

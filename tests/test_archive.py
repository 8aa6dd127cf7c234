"""Export, verify and import ranges of the log."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from props.core.domain.archive import event_lines, exports, imports
from props.core.domain.store import open_store
from props.core.log import errors, migrate
from props.core.log.store import EventStore
from props.projections import engine
from props.tools.checks.workload import Workload
from tests.conftest import fence_clear

EVERYTHING = exports.Selection()
CHAIN_EVERY = exports.CHAIN_EVERY


async def projected(store: EventStore) -> dict[str, list[tuple[object, ...]]]:
    """The projected rows, but where each run was recorded (`provenance`: `here` at the
    source, `import:...` wherever the file is imported; its own test below)."""
    out = {}
    for table, order in (("agent_runs", "run_id"),
                         ("grading_edges", "critique_run_id, critique_issue_id, scorer_name"),
                         ("model_scores", "model, definition, scorer_name, scorer_version")):
        rows = await store.pool.fetch(f"SELECT * FROM projections.{table} ORDER BY {order}")
        out[table] = [tuple(v for k, v in r.items() if k != "provenance") for r in rows]
    return out


async def _export_runs(store: EventStore, runs: int, path: Path) -> Path:
    """A log of `runs` generated runs (and what they run on), exported whole to `path`."""
    w = Workload(31)
    await w.setup(store)
    await w.append_runs(store, runs)
    await fence_clear(store)  # (a shared server: another database's writer holds it)
    report = await exports.export(store, EVERYTHING, path)
    assert report.events == await store.pool.fetchval("SELECT count(*) FROM props.events")
    assert report.blobs > 0  # the specimens' files travel with their snapshots
    return path


@pytest.fixture
async def exported(store: EventStore, tmp_path: Path) -> Path:
    return await _export_runs(store, 40, tmp_path / "log.jsonl.zst")


async def test_round_trip_rebuilds_identical_projections(
    store: EventStore, exported: Path, new_database: object
) -> None:
    await engine.rebuild(store)
    source = await projected(store)
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        # (a whole log carries its consumers' records, its scorer activation: history here,
        # in its stream, without --inert)
        first = await imports.import_archive(target, exported)
        assert first.imported + first.inert == first.events and first.already_present == 0
        assert first.history == {"scorer.activated": 1}
        second = await imports.import_archive(target, exported)
        assert second.imported == 0 and second.already_present == first.events
        await fence_clear(target)
        await engine.rebuild(target)
        assert await projected(target) == source
        assert {r[0] for r in await target.pool.fetch(  # every run says it was imported
            "SELECT DISTINCT provenance FROM projections.agent_runs")} == {"import:unsigned"}
        origin = await target.pool.fetchval(
            "SELECT count(*) FROM props.events WHERE metadata ? 'origin_position'")
        assert origin == first.imported
        blob_count = await target.pool.fetchval("SELECT count(*) FROM props.blobs")
        assert blob_count == first.blobs


def _unchanged(data: bytes, lines: list[bytes]) -> bool:
    """Whether a file's bytes still decompress to exactly `lines` (then nothing changed)."""
    try:
        return zstandard.ZstdDecompressor().decompress(
            data, max_output_size=1 << 30).splitlines(True) == lines
    except zstandard.ZstdError:
        return False


def _lines(path: Path) -> list[bytes]:
    return zstandard.ZstdDecompressor().decompress(path.read_bytes(),
                                                   max_output_size=1 << 30).splitlines(True)


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines)))


async def test_every_mutation_is_refused_before_anything_is_written(
    exported: Path, tmp_path: Path, new_database: object
) -> None:
    exports.verify(exported)  # the control: the intact file passes
    rng = random.Random(6)
    original = exported.read_bytes()
    lines = _lines(exported)
    events = [i for i, line in enumerate(lines) if line.startswith(b"[")]  # version 2's
    mutant = tmp_path / "mutant.jsonl.zst"
    kinds: dict[str, int] = {}
    for n in range(240):
        kind = ("flip", "truncate", "reorder", "drop", "edit", "truncate_lines")[n % 6]
        if kind == "flip":
            data = bytearray(original)
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
            if _unchanged(bytes(data), lines):
                continue  # a bit zstd never reads (a frame header's spare field): the same file
            mutant.write_bytes(bytes(data))
        elif kind == "truncate":
            mutant.write_bytes(original[:rng.randrange(len(original))])
        elif kind == "truncate_lines":
            _write(mutant, lines[:rng.randrange(1, len(lines))])
        else:
            changed = list(lines)
            a, b = sorted(rng.sample(events, 2))
            if kind == "reorder":
                changed[a], changed[b] = changed[b], changed[a]
            elif kind == "drop":
                del changed[a]
            else:
                fields = orjson.loads(changed[a])
                fields[event_lines.FIELDS.index("stream_version")] += 1
                changed[a] = orjson.dumps(fields) + b"\n"
            _write(mutant, changed)
        with pytest.raises(exports.ArchiveError):
            exports.verify(mutant)
        kinds[kind] = kinds.get(kind, 0) + 1
    assert sum(kinds.values()) >= 200 and len(kinds) == 6

    # And through a real import: refused, nothing written.
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        for cut in (len(original) // 3, len(original) - 7):
            mutant.write_bytes(original[:cut])
            with pytest.raises(exports.ArchiveError):
                await imports.import_archive(target, mutant)
        assert await target.pool.fetchval("SELECT count(*) FROM props.events") == 0
        assert await target.pool.fetchval("SELECT count(*) FROM props.blobs") == 0


async def test_selection_by_category_and_position(store: EventStore, exported: Path,
                                                  tmp_path: Path) -> None:
    no_gt = tmp_path / "no-ground-truth.jsonl.zst"
    report = await exports.export(store, exports.Selection(exclude_categories=("snapshot",)),
                                  no_gt)
    kinds = {obj.get("stream_id", "-").split("-")[0] for obj in exports.objects(_lines(no_gt))}
    assert "snapshot" not in kinds and "run" in kinds
    assert report.blobs == 0  # the specimen files belonged to the snapshots
    part = tmp_path / "part.jsonl.zst"
    cut = await exports.export(store, exports.Selection(after_position=10, to_position=30),
                               part)
    positions = [x["position"] for x in exports.objects(_lines(part)) if x["kind"] == "event"]
    assert cut.events == 20 and positions == list(range(11, 31))


async def test_a_newer_format_version_is_refused(exported: Path, tmp_path: Path) -> None:
    lines = _lines(exported)
    header = orjson.loads(lines[0])
    header["version"] = 99
    lines[0] = orjson.dumps(header) + b"\n"
    newer = tmp_path / "newer.jsonl.zst"
    _write(newer, lines)
    with pytest.raises(exports.ArchiveError, match="upgrade props"):
        exports.verify(newer)


VERSION_1 = Path(__file__).parent / "fixtures" / "export-v1.jsonl.zst"  # props at 72eb41b


async def test_a_version_1_file_still_imports_and_exports_again_as_version_2(
    store: EventStore, new_database: object, tmp_path: Path
) -> None:
    """A file props wrote before format version 2 (every event an object) verifies and
    imports; written again from there it is version 2, and imports to the same projections."""
    assert orjson.loads(_lines(VERSION_1)[0])["version"] == 1
    assert exports.verify(VERSION_1).events == 1078
    first = await imports.import_archive(store, VERSION_1)
    assert first.imported == 1078 and first.blobs == 16
    again = tmp_path / "again.jsonl.zst"
    await fence_clear(store)
    await exports.export(store, EVERYTHING, again)
    assert orjson.loads(_lines(again)[0])["version"] == 2
    old = {e["event_id"]: e for e in exports.objects(_lines(VERSION_1)) if e["kind"] == "event"}
    new = {e["event_id"]: e for e in exports.objects(_lines(again)) if e["kind"] == "event"}
    assert old.keys() <= new.keys()  # (and the import's own record)
    for event_id, event in old.items():  # the same events, under new positions
        assert {k: v for k, v in new[event_id].items() if k not in ("position", "tx_id",
                                                                     "metadata")} == \
            {k: v for k, v in event.items() if k not in ("position", "tx_id", "metadata")}
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        second = await imports.import_archive(target, again)
        assert second.imported == second.events == 1079
        await fence_clear(target)
        await fence_clear(store)
        await engine.rebuild(target)
        await engine.rebuild(store)
        assert await projected(target) == await projected(store)
    # Negative control: the old file's chain still holds it (an edit of one event refused).
    lines = _lines(VERSION_1)
    at = next(i for i, line in enumerate(lines) if b'"kind":"event"' in line)
    edited = tmp_path / "edited.jsonl.zst"
    _write(edited, [*lines[:at], lines[at].replace(b'"stream_version":1', b'"stream_version":2'),
                    *lines[at + 1:]])
    with pytest.raises(exports.ArchiveError, match="hash chain breaks"):
        exports.verify(edited)


@pytest.mark.parametrize(("field", "value", "refusal"), [
    # times PostgreSQL reads its own way: not the time the file says, or none a reader decodes
    ("recorded_at", "now", "time 'now' is not an ISO 8601 time"),
    ("recorded_at", "epoch", "time 'epoch' is not an ISO 8601 time"),
    ("recorded_at", "0100-01-01 BC", "is not an ISO 8601 time"),
    ("recorded_at", "-infinity", "is not an ISO 8601 time"),
    ("recorded_at", "2020-01-01 12:00 PST", "is not an ISO 8601 time"),
    ("recorded_at", "2020-01-01T00:00:00", "has no offset from UTC"),
    ("stream_version", "1", "stream version '1' is not a whole number from 1"),
    ("stream_version", 0, "stream version '0' is not"),
    ("stream_version", -1, "stream version '-1' is not"),
    ("stream_version", 2**31, "is not a whole number from 1 to 2,147,483,647"),
    ("stream_version", True, "stream version 'True' is not"),
    ("stream_id", "scorer-overlap x", "is not CATEGORY-ID"),
    ("stream_id", "scorer-overlap\n", "is not CATEGORY-ID"),
    ("position", 2**63, "position 9223372036854775808 is not from 1 to 9,223,372,036,"),
])
async def test_a_field_the_log_would_read_otherwise_is_refused_naming_its_line(
    exported: Path, tmp_path: Path, field: str, value: Any, refusal: str
) -> None:
    """A consistent file (re-chained, recounted) whose one event carries a value the log
    would store as something else, or never take: refused while verifying, naming the line."""
    lines = list(exports.objects(_lines(exported)))
    at = [i for i, obj in enumerate(lines) if obj["kind"] == "event"][-1]  # (last: positions)
    crafted = tmp_path / "crafted.jsonl.zst"
    _write(crafted, _rechained(lines))
    exports.verify(crafted)  # the control: re-chained as it was, it verifies
    lines[at] = {**lines[at], field: value}
    _write(crafted, _rechained(lines))
    with pytest.raises(exports.ArchiveError, match=rf":{at + 1}: .*{re.escape(refusal)}"):
        exports.verify(crafted)


@pytest.mark.parametrize("header", [
    {"event_fields": list(reversed(event_lines.FIELDS))}, {"event_fields": None},
    {"version": True}, {"version": 2.0},
])
async def test_a_header_this_props_would_read_otherwise_is_refused(
    exported: Path, tmp_path: Path, header: dict[str, Any]
) -> None:
    """The fields read by place are the ones the header names; a version is a number."""
    lines = _lines(exported)
    changed = tmp_path / "changed.jsonl.zst"
    _write(changed, [exports._line({**orjson.loads(lines[0]), **header}), *lines[1:]])
    with pytest.raises(exports.ArchiveError, match=r":1: (the header's event_fields are not|"
                                                   r"archive format version)"):
        exports.verify(changed)


async def test_an_event_id_given_twice_is_refused_naming_both_lines(
    exported: Path, tmp_path: Path, new_database: object
) -> None:
    lines = list(exports.objects(_lines(exported)))
    events = [i for i, obj in enumerate(lines) if obj["kind"] == "event"]
    first, again = events[3], events[10]
    lines[again] = {**lines[again], "event_id": lines[first]["event_id"]}
    crafted = tmp_path / "crafted.jsonl.zst"
    _write(crafted, _rechained(lines))
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        with pytest.raises(exports.ArchiveError, match=rf":{again + 1}: event id "
                                                       rf"{lines[first]['event_id']} again "
                                                       rf"\(first at line {first + 1}\)"):
            await imports.import_archive(target, crafted, inert=True)
        assert await target.pool.fetchval("SELECT count(*) FROM props.events") == 0


async def test_an_import_stages_large_events_in_chunks_bounded_by_bytes(
    store: EventStore, tmp_path: Path, new_database: object,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events of 1 MiB each (metadata the log took) go over a few at a time, not a thousand:
    what an import holds is bounded by bytes, whatever each line's size."""
    source = await _export_runs(store, 2, tmp_path / "small.jsonl.zst")
    lines = list(exports.objects(_lines(source)))
    events = [i for i, obj in enumerate(lines) if obj["kind"] == "event"]
    for i in events[-12:]:
        lines[i] = {**lines[i], "metadata": {"pad": "x" * (1 << 20)}}
    big = tmp_path / "big.jsonl.zst"
    _write(big, _rechained(lines))
    staged: list[int] = []
    original = imports._stage

    async def counted(conn: Any, path: Path, chunk: Any) -> None:
        staged.append(len(chunk.events))
        await original(conn, path, chunk)

    monkeypatch.setattr(imports, "_STAGE_BYTES", 3 << 20)
    monkeypatch.setattr(imports, "_stage", counted)
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        report = await imports.import_archive(target, big, inert=True)
    assert report.imported + report.inert == len(events)
    assert sum(staged) == len(events) and len(staged) >= 4 and staged[-1] <= 3


def _event_line_at(lines: list[bytes], n: int) -> int:
    return [i for i, line in enumerate(lines) if line.startswith(b"[")][n]


@pytest.mark.parametrize(("change", "refusal"), [
    (lambda f: f.__setitem__(0, 0), "position step 0 is not a whole number of at least 1"),
    (lambda f: f.__setitem__(0, -3), "position step -3 is not"),
    (lambda f: f.__setitem__(0, True), "position step true is not"),
    (lambda f: f.__setitem__(1, 1.5), "transaction step 1.5 is not a whole number"),
    (lambda f: f.__setitem__(9, 7), "time 7 is not a string"),
    (lambda f: f.append("x"), "an event line has 10 fields, not 11"),
    (lambda f: f.pop(), "an event line has 10 fields, not 9"),
])
async def test_a_version_2_event_line_that_does_not_read_back_is_refused_naming_it(
    exported: Path, tmp_path: Path, change: Any, refusal: str
) -> None:
    """A line whose chain holds (re-chained by whoever wrote it) but whose fields cannot be
    read as an event: refused by `verify`, naming the line, before any import stages it."""
    lines = _lines(exported)
    at = _event_line_at(lines, 5)
    fields = orjson.loads(lines[at])
    change(fields)
    crafted = tmp_path / "crafted.jsonl.zst"
    _write(crafted, _relinked([*lines[:at], orjson.dumps(fields) + b"\n", *lines[at + 1:]]))
    with pytest.raises(exports.ArchiveError, match=rf":{at + 1}: {refusal}"):
        exports.verify(crafted)
    _write(crafted, _relinked(lines))  # negative control: the same file, unchanged, verifies
    exports.verify(crafted)


async def test_the_first_event_s_time_is_never_left_to_the_one_before(
    exported: Path, tmp_path: Path
) -> None:
    lines = _lines(exported)
    at = _event_line_at(lines, 0)
    fields = orjson.loads(lines[at])
    fields[9] = None
    crafted = tmp_path / "crafted.jsonl.zst"
    _write(crafted, _relinked([*lines[:at], orjson.dumps(fields) + b"\n", *lines[at + 1:]]))
    with pytest.raises(exports.ArchiveError, match=rf":{at + 1}: the first event's time"):
        exports.verify(crafted)


async def test_a_chain_link_spelled_otherwise_is_not_a_link(
    store: EventStore, tmp_path: Path
) -> None:
    """The 1000th event line's link, with a space before it: the same JSON, but not the
    bytes the exporter wrote, so no link (and a field too many)."""
    exported = await _export_runs(store, 60, tmp_path / "log.jsonl.zst")
    exports.verify(exported)  # the control: as written, the link is one
    lines = _lines(exported)
    at = _event_line_at(lines, CHAIN_EVERY - 1)
    assert re.search(rb',"[0-9a-f]{64}"\]\n\Z', lines[at])  # (the 1000th: it shows one)
    spaced = lines[at][:-69] + b', "' + lines[at][-67:]
    assert orjson.loads(spaced) == orjson.loads(lines[at])
    crafted = tmp_path / "crafted.jsonl.zst"
    _write(crafted, [*lines[:at], spaced, *lines[at + 1:]])
    with pytest.raises(exports.ArchiveError, match=rf":{at + 1}: the hash chain breaks"):
        exports.verify(crafted)


async def test_an_edited_event_is_placed_after_the_last_link_that_held(
    store: EventStore, tmp_path: Path
) -> None:
    """An edit is found at the next link shown, or at the manifest's: the refusal names
    that line, or the last line whose link held."""
    exported = await _export_runs(store, 60, tmp_path / "log.jsonl.zst")
    short = tmp_path / "short.jsonl.zst"  # fewer events than CHAIN_EVERY: no link shown
    await exports.export(store, exports.Selection(to_position=500), short)
    edited = tmp_path / "edited.jsonl.zst"

    def refusal(path: Path, event: int) -> str:
        lines = _lines(path)
        at = _event_line_at(lines, event)
        _write(edited, [*lines[:at], lines[at].replace(b"[1,", b"[2,", 1), *lines[at + 1:]])
        with pytest.raises(exports.ArchiveError) as caught:
            exports.verify(edited)
        return str(caught.value)

    linked = _event_line_at(_lines(exported), CHAIN_EVERY - 1) + 1  # the 1000th's line
    assert f"edited.jsonl.zst:{linked}: the hash chain breaks at event 1,000" in \
        refusal(exported, 5)
    assert f"edited.jsonl.zst: the hash chain breaks after line {linked}, its last link" in \
        refusal(exported, CHAIN_EVERY + 5)
    assert "edited.jsonl.zst: the hash chain breaks after the header" in refusal(short, 5)


def _relinked(lines: list[bytes]) -> list[bytes]:
    """Raw version 2 lines with the chain and manifest recomputed over them as they stand
    (`_rechained` would read each event, and so refuse the ones these tests break)."""
    out: list[bytes] = []
    link, n = exports._GENESIS, 0
    for line in lines:
        if line.startswith(b"["):
            fields = orjson.loads(line)
            body, _ = event_lines.split_link(line, fields)
            link, n = exports._link(link, body), n + 1
            line = event_lines.with_link(body, link) if n % CHAIN_EVERY == 0 else body
        elif b'"kind":"manifest"' in line:
            manifest = orjson.loads(line)
            line = exports._line({**manifest, "chain": link,
                                  "sha256": hashlib.sha256(b"".join(out)).hexdigest()})
        out.append(line)
    return out


async def test_a_range_without_its_beginning_is_refused_whole(
    store: EventStore, exported: Path, tmp_path: Path, new_database: object
) -> None:
    tail = tmp_path / "tail.jsonl.zst"
    middle = await store.pool.fetchval(  # an event in the middle of a run's stream
        "SELECT min(global_position) FROM props.events WHERE stream_version > 2 "
        "AND stream_id LIKE 'run-%'")
    await exports.export(store, exports.Selection(after_position=middle - 1), tail)
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        with pytest.raises(errors.PropsError, match="import the range before it"):
            await imports.import_archive(target, tail)
        assert await target.pool.fetchval("SELECT count(*) FROM props.events") == 0


def _rechained(objects: list[dict[str, Any]]) -> list[bytes]:
    """The lines (as `exports.objects` reads them) written again with every chain link and
    the manifest recomputed (its counts too), as an exporter that wrote them would have: a
    consistent archive, whatever its content."""
    out: list[bytes] = []
    chain = exports.EventChain()
    counts: dict[str, int] = {}
    for obj in objects:
        if obj["kind"] == "event":
            out.append(chain.line([obj[f] for f in event_lines.FIELDS]))
            counts[obj["type"]] = counts.get(obj["type"], 0) + 1
        elif obj["kind"] == "manifest":
            content = hashlib.sha256(b"".join(out)).hexdigest()
            out.append(exports._line({**obj, "chain": chain.link, "sha256": content,
                                      "events": chain.events,
                                      "counts": dict(sorted(counts.items()))}))
        else:
            out.append(exports._line(obj))
    return out


async def test_a_consistent_archive_with_a_malformed_field_is_refused(
    exported: Path, tmp_path: Path, new_database: object
) -> None:
    lines = list(exports.objects(_lines(exported)))
    events = [i for i, obj in enumerate(lines) if obj["kind"] == "event"]
    bad = lines[events[2]]
    crafted = tmp_path / "crafted.jsonl.zst"
    # An event id is checked while verifying (only the spelling props writes: see
    # test_imports_add), naming the line; a schema version of a type this props does not know
    # (taken as it is) only by the database, while staging.
    _write(crafted, _rechained([*lines[:events[2]], {**bad, "event_id": "not-a-uuid"},
                                *lines[events[2] + 1:]]))
    with pytest.raises(exports.ArchiveError, match=rf":{events[2] + 1}: event id 'not-a-uuid' "
                                                   r"is not a UUID as props writes it"):
        exports.verify(crafted)
    lines[events[2]] = {**bad, "type": "made.up", "schema_version": 70_000}
    _write(crafted, _rechained(lines))
    # the chain and manifest hold: only the field is wrong
    exports.verify(crafted, allow_unknown=True)
    other = new_database()  # type: ignore[operator]
    await migrate.migrate_database(other)
    async with open_store(other) as target:
        with pytest.raises(exports.ArchiveError, match=r"lines \d+-\d+: an event with a "
                                                       r"malformed field.*nothing was written"):
            await imports.import_archive(target, crafted, allow_unknown=True)
        assert await target.pool.fetchval("SELECT count(*) FROM props.events") == 0
        assert await target.pool.fetchval("SELECT count(*) FROM props.blobs") == 0
    # Negative control: the same archive re-chained without the edit imports.
    _write(crafted, _rechained(list(exports.objects(_lines(exported)))))
    async with open_store(other) as target:
        report = await imports.import_archive(target, crafted, inert=True)
        assert report.imported + report.inert == report.events > 0


def _bomb(path: Path, line_bytes: int) -> None:
    """A zstd file of a few hundred KB that decompresses to one line of `line_bytes`."""
    import zstandard

    block = b"a" * (1024 * 1024)
    with path.open("wb") as raw, zstandard.ZstdCompressor(level=1).stream_writer(raw) as sink:
        sink.write(b'{"kind": "header", "format": "props-export", "version": 1}\n')
        for _ in range(line_bytes // len(block)):
            sink.write(block)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["verify", "import"])
def test_a_decompression_bomb_is_refused_in_bounded_memory(
        tmp_path: Path, dsn: str, command: str) -> None:
    """One 1 GiB line from a ~100 KB file: refused with exit 65 naming the limit, the
    command's peak memory far below the line (before: read whole, 12 GB, MemoryError)."""
    import os
    import subprocess
    import sys

    bomb = tmp_path / "bomb.jsonl.zst"
    _bomb(bomb, 1024**3)
    assert bomb.stat().st_size < 1024 * 1024
    # A parent of its own, whose only child is the command: its children's peak is the
    # command's (kB).
    measure = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:])"
               ".returncode; print('peak', resource.getrusage(resource.RUSAGE_CHILDREN)"
               ".ru_maxrss, file=sys.stderr); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m",
                           "props.tools.cli", command, str(bomb)],
                          capture_output=True, text=True, timeout=1200, check=False,
                          env={**os.environ, "PROPS_DSN": dsn})
    assert done.returncode == 65, done.stderr
    assert "longer than 67,108,864 bytes" in done.stderr and "Traceback" not in done.stderr
    peak_kb = int(done.stderr.rsplit("peak ", 1)[1].split()[0])
    assert peak_kb < 512 * 1024, peak_kb



def test_an_export_stopped_by_a_signal_removes_its_partial_file(dsn: str,
                                                                tmp_path: Path) -> None:
    """`props export` sent SIGTERM (or Ctrl-C) at points through its writing: it stops within
    seconds, exits 143 (130), says so in one line and leaves neither the file nor its
    `.partial`. (Cancelling the task itself, as asyncio's Ctrl-C does, closed the compressor
    under a write still in its worker thread: 6 of 12 such exports hung, 5 left the partial.)"""
    import os
    import signal
    import subprocess
    import sys
    import time

    import anyio

    async def fill() -> None:
        async with open_store(dsn) as store:
            work = Workload(seed=3)
            await work.setup(store)
            await work.append_runs(store, 1500)  # ~29,000 events: an export of a second or so

    anyio.run(fill)
    out = tmp_path / "log.jsonl.zst"
    partial = out.with_name(out.name + ".partial")
    cut = 0
    for n, (signum, delay) in enumerate([(signal.SIGTERM, 0.0), (signal.SIGTERM, 0.3),
                                         (signal.SIGTERM, 0.6), (signal.SIGINT, 0.3)]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "props.tools.cli", "export", "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "PROPS_DSN": dsn},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL) and None)
        try:
            deadline = time.monotonic() + 60
            while not partial.exists():
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.01)
            time.sleep(delay)
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode == 0:  # (it finished first: nothing was cut, so nothing to see)
            out.unlink()
            continue
        cut += 1
        said = err.decode().strip().splitlines()[-1]
        assert (proc.returncode, said) == ((143, "props: stopped by SIGTERM")
                                           if signum == signal.SIGTERM
                                           else (130, "props: interrupted")), (n, err)
        assert not out.exists() and not partial.exists(), n
    assert cut >= 2  # (an export too quick for every signal would test nothing)

"""Imports that cannot change the story quietly: every event checked against the catalog,
signatures by trusted keys, the origin of each imported event kept, backdated ground truth
refused, and reports that say how much rests on imported runs.

The attack these stop: an export written from scratch with a recomputed chain verifies
intact, so integrity alone let forged runs move a model's recall, a backdated snapshot
become the ground truth a rescore graded against, and events no reader can decode enter the
log for good.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from props.core.domain import catalog
from props.core.domain.archive import exports, imports, signing
from props.core.domain.store import open_store
from props.core.log import migrate
from props.core.log.store import EventStore
from props.projections import engine, figures
from props.tools.checks.workload import Workload
from tests.conftest import fence_clear
from tests.test_archive import _lines, _rechained, _write

EVERYTHING = exports.Selection()


@pytest.fixture
async def source(store: EventStore) -> EventStore:
    w = Workload(5)
    await w.setup(store)
    await w.append_runs(store, 12)
    return store


@pytest.fixture
async def target(new_database: Callable[[], str]) -> AsyncIterator[EventStore]:
    dsn = new_database()
    await migrate.migrate_database(dsn)
    async with open_store(dsn) as s:
        yield s


async def count(store: EventStore) -> int:
    n: int = await store.pool.fetchval("SELECT count(*) FROM props.events")
    return n


def crafted(path: Path, out: Path, change: Callable[[list[dict[str, Any]]], None]) -> Path:
    """`path`'s lines, changed by `change` (on the parsed event lines), re-chained and with
    a manifest recounted and unsigned: a file an attacker wrote from scratch."""
    lines = list(exports.objects(_lines(path)))
    events = [obj for obj in lines if obj["kind"] == "event"]
    change(events)
    counts: dict[str, int] = {}
    for e in events:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    manifest = {k: v for k, v in lines[-1].items() if k != "signature"}
    manifest.update(events=len(events), counts=dict(sorted(counts.items())))
    rebuilt = [obj for obj in lines[:-1] if obj["kind"] != "event"] + events + [manifest]
    _write(out, _rechained(rebuilt))
    return out


def first_of(type_name: str) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
    return lambda events: next(e for e in events if e["type"] == type_name)


MUTATIONS: dict[str, tuple[Callable[[list[dict[str, Any]]], None], str]] = {
    "run.finished with data the catalog refuses": (
        lambda ev: first_of("run.finished")(ev).update(data={"evil": True}),
        "invalid run.finished event"),
    "a grade that is a string": (
        lambda ev: first_of("grade.emitted")(ev)["data"].update(grade="high"),
        "invalid grade.emitted event"),
    "a schema version from the future": (
        lambda ev: first_of("run.requested")(ev).update(schema_version=99),
        "schema version 99"),
    "an unknown event type": (
        lambda ev: first_of("run.started")(ev).update(type="run.exploded"),
        "unknown event type 'run.exploded'"),
    "a stream name the log refuses": (
        lambda ev: first_of("run.started")(ev).update(stream_id="Run x"),
        "is not CATEGORY-ID"),
}


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
async def test_events_the_catalog_refuses_refuse_the_whole_file(
        source: EventStore, target: EventStore, tmp_path: Path, kind: str) -> None:
    intact = tmp_path / "intact.jsonl.zst"
    await exports.export(source, EVERYTHING, intact)
    change, message = MUTATIONS[kind]
    bad = crafted(intact, tmp_path / "bad.jsonl.zst", change)
    with pytest.raises(exports.ArchiveError, match=rf"bad.jsonl.zst:\d+: .*{message}"):
        exports.verify(bad)
    with pytest.raises(exports.ArchiveError, match="nothing was written"):
        await imports.import_archive(target, bad)
    assert await count(target) == 0


async def test_unknown_types_are_taken_only_when_allowed(
        source: EventStore, target: EventStore, tmp_path: Path) -> None:
    intact = tmp_path / "intact.jsonl.zst"
    exported = await exports.export(source, EVERYTHING, intact)
    bad = crafted(intact, tmp_path / "unknown.jsonl.zst", MUTATIONS["an unknown event type"][0])
    report = await imports.import_archive(target, bad, allow_unknown=True, inert=True)
    assert report.imported + report.inert == exported.events
    assert await target.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'run.exploded'") == 1
    # Negative control of the whole family above: the intact file verifies as it is.
    assert exports.verify(intact).events == exported.events


async def test_signed_exports_and_trusted_signers(
        source: EventStore, target: EventStore, tmp_path: Path) -> None:
    ours = signing.create(tmp_path / "keys", "ours")
    theirs = signing.create(tmp_path / "other-keys", "theirs")
    trusted = signing.public_keys(tmp_path / "keys")
    assert [k.fingerprint for k in trusted] == [ours.fingerprint]
    signed = tmp_path / "signed.jsonl.zst"
    await exports.export(source, EVERYTHING, signed,
                         sign_with=signing.load_private("ours", tmp_path / "keys"))
    by_them = tmp_path / "theirs.jsonl.zst"
    await exports.export(source, EVERYTHING, by_them,
                         sign_with=signing.load_private("theirs", tmp_path / "other-keys"))
    forged = crafted(signed, tmp_path / "forged.jsonl.zst", lambda events: None)  # unsigned
    tampered = tmp_path / "tampered.jsonl.zst"
    lines = _lines(signed)
    manifest = orjson.loads(lines[-1])
    manifest["selection"] = {"after_position": 7}  # not checked by the chain: by the signature
    _write(tampered, [*lines[:-1], orjson.dumps(manifest) + b"\n"])

    exports.verify(forged)  # intact: integrity alone cannot tell a forgery
    for path, message in ((forged, "not signed"), (by_them, f"signed by key {theirs.fingerprint}"),
                          (tampered, "does not verify")):
        with pytest.raises(signing.SignatureError, match=message):
            await imports.import_archive(target, path, trusted=trusted)
        assert await count(target) == 0
    with pytest.raises(signing.SignatureError, match="does not verify"):
        await imports.import_archive(target, tampered)  # a bad signature, trusted or not

    report = await imports.import_archive(target, signed, trusted=trusted, inert=True)
    assert report.signer == ours.fingerprint and report.imported > 0
    origins = await target.pool.fetch(
        "SELECT DISTINCT metadata->'origin'->>'signer' AS signer, "
        "metadata->'origin'->>'archive' AS archive FROM props.events "
        "WHERE type NOT IN ('archive.imported', 'import.inert')")
    assert [r["signer"] for r in origins] == [ours.fingerprint]
    assert origins[0]["archive"] == orjson.loads(_lines(signed)[-1])["archive_id"]
    recorded = [r.event for r in await target.read_stream(f"import-{origins[0]['archive']}")]
    assert len(recorded) == 1 and isinstance(recorded[0], catalog.ArchiveImported)
    runs = await source.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'run.requested'")
    assert recorded[0].signer == ours.fingerprint and len(recorded[0].runs) == runs


async def test_reports_count_imported_runs_and_can_leave_them_out(
        source: EventStore, target: EventStore, tmp_path: Path) -> None:
    signed = tmp_path / "signed.jsonl.zst"
    key = signing.create(tmp_path / "keys", "k")
    await exports.export(source, EVERYTHING, signed,
                         sign_with=signing.load_private("k", tmp_path / "keys"))
    await imports.import_archive(target, signed, inert=True)
    w = Workload(9)  # and runs of the target's own, on the same specimens
    await w.setup(target)
    await w.append_runs(target, 4)
    await fence_clear(target)
    await engine.rebuild(target)
    everything, notes = await figures.load(target)
    own, own_notes = await figures.load(target, exclude_imported=True)
    imported = notes["imported_runs"]
    assert imported > 0 and notes[f"imported_by_{key.fingerprint}"] == imported
    assert sum(int(r["runs"]) for r in everything) - sum(int(r["runs"]) for r in own) == \
        imported
    assert own_notes["imported_excluded"] == 1 and sum(int(r["runs"]) for r in own) > 0


async def test_a_backdated_snapshot_version_is_refused(
        source: EventStore, target: EventStore, tmp_path: Path) -> None:
    intact = tmp_path / "intact.jsonl.zst"
    await exports.export(source, EVERYTHING, intact)
    await imports.import_archive(target, intact, inert=True)  # the snapshots' version 1

    def next_version(at: datetime) -> Callable[[list[dict[str, Any]]], None]:
        def change(events: list[dict[str, Any]]) -> None:
            synced = first_of("snapshot.synced")(events)
            events[:] = [{**synced, "event_id": str(uuid.uuid4()),
                          "stream_version": synced["stream_version"] + 1,
                          "position": 10**9, "recorded_at": at.isoformat()}]
        return change

    old = crafted(intact, tmp_path / "old.jsonl.zst",
                  next_version(datetime(2020, 1, 1, tzinfo=UTC)))
    before = await count(target)
    with pytest.raises(exports.ArchiveError, match="recorded before the version it follows"):
        await imports.import_archive(target, old)
    assert await count(target) == before
    # A version recorded in the future is refused too: no log takes a time it has not seen.
    future = crafted(intact, tmp_path / "future.jsonl.zst",
                     next_version(datetime.now(UTC) + timedelta(hours=1)))
    with pytest.raises(exports.ArchiveError, match="in the future"):
        await imports.import_archive(target, future)
    assert await count(target) == before
    # Negative control: the same version recorded after the one it follows is taken.
    later = crafted(intact, tmp_path / "later.jsonl.zst", next_version(datetime.now(UTC)))
    assert (await imports.import_archive(target, later)).imported == 1


async def test_the_cli_signs_and_refuses_in_one_line(source: EventStore, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PROPS_DSN": source.dsn, "PROPS_HOME": str(tmp_path / "home")}

    def props(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "props.tools.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    made = props("keys", "create", "lab")
    assert made.returncode == 0 and "fingerprint" in made.stdout, made.stderr
    assert props("keys", "create", "lab").returncode == 78  # never overwritten
    listed = props("keys", "list")
    assert "lab" in listed.stdout
    signed, unsigned = tmp_path / "signed.jsonl.zst", tmp_path / "unsigned.jsonl.zst"
    assert props("export", "-o", str(signed), "--sign", "lab").returncode == 0
    assert props("export", "-o", str(unsigned)).returncode == 0
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    (trusted / "lab.pub").write_bytes((tmp_path / "home" / "keys" / "lab.pub").read_bytes())
    ok = props("verify", str(signed), "--trusted-keys", str(trusted))
    assert ok.returncode == 0 and "signed by" in ok.stdout, ok.stderr
    assert "format version 2" in " ".join(ok.stdout.split())  # (wrapped at the terminal)
    refused = props("import", str(unsigned), "--trusted-keys", str(trusted))
    assert refused.returncode == 65, refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "not signed" in refused.stderr
    missing = props("export", "-o", str(tmp_path / "no" / "such" / "x.zst"))
    assert missing.returncode == 78 and "Traceback" not in missing.stderr
    # A category no event is in (a typo in an exclusion) is refused, never exported past.
    typo = tmp_path / "typo.jsonl.zst"
    refused = props("export", "-o", str(typo), "--exclude-category", "snapshott")
    assert refused.returncode == 66 and not typo.exists(), refused.stderr
    assert refused.stderr.strip().count("\n") == 0 and "'snapshott'" in refused.stderr
    assert "snapshot" in refused.stderr.replace("'snapshott'", "")  # the log's, listed
    # A list in one flag is the flag repeated.
    listed_once = props("export", "-o", str(tmp_path / "two.jsonl.zst"),
                        "--category", "definition,scorer")
    repeated = props("export", "-o", str(tmp_path / "again.jsonl.zst"),
                     "--category", "definition", "--category", "scorer")
    assert listed_once.returncode == repeated.returncode == 0, listed_once.stderr
    assert listed_once.stdout.split(" event(s)")[0] == repeated.stdout.split(" event(s)")[0]
    assert not listed_once.stdout.startswith("exported 0 ")
    gone = props("verify", str(tmp_path / "no-such.jsonl.zst"))
    assert gone.returncode == 66 and "no such file" in gone.stderr, gone.stderr

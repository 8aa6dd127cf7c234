"""A run's example written out before its container starts: every file byte for byte, each
distinct content fetched once, many to a round trip (one query a file made a real project's
453 files 453 round trips before each run's start)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from props.core.domain import catalog
from props.core.log import errors
from props.core.log.store import EventStore
from props.reactors.gateway import Gateway
from props.reactors.launcher import run_specs
from props.reactors.launcher.run_specs import RunSpecs
from tests.reactor_helpers import sync_specimen

SLUG = "many/2026-12-07-00"
DISTINCT = 300  # more than one round trip's worth (run_specs.BLOBS_AT_ONCE)
SAME = b"print('the same bytes at three paths')\n"


async def _specimen(store: EventStore, folder: Path) -> dict[str, bytes]:
    files = {f"pkg/m{n:03d}.py": f"value = {n}\n".encode() for n in range(DISTINCT)}
    files |= {f"copies/c{n}.py": SAME for n in range(3)}
    await sync_specimen(store, folder, SLUG, files, ("pkg/m000.py", 1))
    return files


def _request() -> catalog.RunRequested:
    return catalog.RunRequested(
        run_id=uuid.uuid4(), agent_type="critic", definition="any", model="m",
        example=catalog.Example(snapshot=SLUG), timeout_seconds=60, budget_usd=0)


async def test_an_examples_files_are_written_whole_a_chunk_of_blobs_at_a_time(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = await _specimen(store, tmp_path / "specimens")
    asked: list[int] = []
    real = store.get_blobs

    async def counted(sha256s: Any) -> dict[str, bytes]:
        asked.append(len(sha256s))
        return await real(sha256s)

    monkeypatch.setattr(store, "get_blobs", counted)
    specs = RunSpecs(store, tmp_path / "work", cast(Gateway, None))
    target = await specs.materialise(_request(), tmp_path / "example", datetime.now(UTC))

    written = {str(p.relative_to(target)): p.read_bytes()
               for p in target.rglob("*") if p.is_file()}
    assert written == files
    # each distinct content once (the three copies are one blob), in full chunks
    assert sum(asked) == DISTINCT + 1
    assert asked == [run_specs.BLOBS_AT_ONCE, DISTINCT + 1 - run_specs.BLOBS_AT_ONCE]


async def test_an_example_whose_blob_is_gone_is_refused_by_name(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _specimen(store, tmp_path / "specimens")
    real = store.get_blobs
    lost: list[str] = []

    async def one_lost(sha256s: Any) -> dict[str, bytes]:
        found = await real(sha256s)
        if not lost:
            lost.append(min(found))
            del found[lost[0]]
        return found

    monkeypatch.setattr(store, "get_blobs", one_lost)
    specs = RunSpecs(store, tmp_path / "work", cast(Gateway, None))
    with pytest.raises(errors.BlobNotFound) as refused:
        await specs.materialise(_request(), tmp_path / "example", datetime.now(UTC))
    assert str(refused.value) == f"no blob {lost[0]} in this database"

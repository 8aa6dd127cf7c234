"""Hostile export files, one per way an import could act on the database it enters.

Each is written from scratch against a target database (its runs, its grades, its streams),
re-chained and with a recounted, unsigned manifest: a file anyone can write, which verifies
intact. `KINDS` names each with the event it carries; `write(kind, ...)` makes the file.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from props.core.domain.archive import export_lines, exports, imports, signing
from props.core.log.store import EventStore
from tests.test_archive import _rechained, _write


@dataclasses.dataclass(frozen=True)
class Local:
    """What the target holds that a hostile file aims at."""

    run_id: str  # a critic run of the target's own
    run_head: int  # its stream's version
    grade_stream: str  # a grading stream of that run
    grade_data: dict[str, Any]  # one of its grade events' data
    grade_event_id: str
    grade_position: int


def _event(stream_id: str, version: int, type_name: str, data: dict[str, Any],
           n: int) -> dict[str, Any]:
    return {"kind": "event", "position": 10_000 + n, "tx_id": 1,
            "event_id": str(uuid.uuid4()), "stream_id": stream_id, "stream_version": version,
            "type": type_name, "schema_version": 1, "data": data, "metadata": {},
            "recorded_at": datetime(2024, 1, 1, tzinfo=UTC).isoformat()}


def _parked(t: Local) -> list[dict[str, Any]]:
    return [_event("reactor-projections", 1, "event.parked", {
        "reactor": "projections", "event_id": t.grade_event_id,
        "global_position": t.grade_position, "error_type": "Poison",
        "error_message": "cherry-picked", "attempts": 1}, 1)]


def _retried(t: Local) -> list[dict[str, Any]]:
    return [_event("reactor-grader", 1, "parked.retried", {
        "reactor": "grader", "event_id": t.grade_event_id,
        "global_position": t.grade_position}, 1)]


def _excluded(t: Local) -> list[dict[str, Any]]:
    return [_event(f"exclusion-{uuid.uuid4()}", 1, "run.excluded",
                   {"run_id": t.run_id, "reason": "not yours to say"}, 1)]


def _activated(t: Local) -> list[dict[str, Any]]:
    return [_event("scorer-evil", 1, "scorer.activated", {"name": "overlap", "version": 2}, 1)]


def _retention(t: Local) -> list[dict[str, Any]]:
    return [_event(f"retention-{t.run_id}", 1, "retention.held",
                   {"run_id": t.run_id, "reason": "keep it hot forever"}, 1)]


def _grades_of_own_run(t: Local) -> list[dict[str, Any]]:
    stream = f"grading-{t.run_id}-overlap@9"
    return [_event(stream, 1, "grade.emitted", {**t.grade_data, "grade": 1.0}, 1)]


def _appended_to_own_stream(t: Local) -> list[dict[str, Any]]:
    return [_event(f"run-{t.run_id}", t.run_head + 1, "run.cancel_requested",
                   {"run_id": t.run_id, "requested_by": "someone else"}, 1)]


def _own_run_marked_imported(t: Local) -> list[dict[str, Any]]:
    return [_event(f"import-{uuid.uuid4()}", 1, "archive.imported", {
        "archive_id": "forged", "sha256": "0" * 64, "signer": None, "events": 1,
        "imported": 1, "part": 1, "runs": [{"run_id": t.run_id}]}, 1)]


def _request_naming_own_run(t: Local) -> list[dict[str, Any]]:
    """A new stream whose request names a run of the target (projections key runs by it)."""
    return [_event(f"run-{uuid.uuid4()}", 1, "run.finished",
                   {"run_id": t.run_id, "status": "completed"}, 1)]


# kind -> (the events, the reason the refusal gives)
KINDS: dict[str, tuple[Callable[[Local], list[dict[str, Any]]], str]] = {
    "run.excluded of a local run": (_excluded, "names critic run"),
    "retention.held of a local run": (_retention, "names critic run"),
    "grades of a local run": (_grades_of_own_run, "names critic run"),
    "an event appended to a local stream": (_appended_to_own_stream,
                                            "appends to a stream holding events of"),
    "archive.imported naming a local run": (_own_run_marked_imported, "names critic run"),
    "an event naming a local run in its data": (_request_naming_own_run, "names critic run"),
}


# The origin's records of its own consumers: never refused, never acting here (issue 55).
# kind -> (the events, kept where: "inert" as import.inert, "history" in their own stream)
ORIGINS_CONSUMERS: dict[str, tuple[Callable[[Local], list[dict[str, Any]]], str]] = {
    "event.parked": (_parked, "inert"),
    "parked.retried": (_retried, "inert"),
    "scorer.activated": (_activated, "history"),
}


def write(out: Path, template: Path, events: list[dict[str, Any]],
          sign_with: Ed25519PrivateKey | None = None) -> Path:
    """`template`'s header with `events` (and no blobs), re-chained, manifest recounted and
    unsigned (or signed by `sign_with`)."""
    lines = list(exports.objects(line for _, line in export_lines.read_lines(template)))
    counts: dict[str, int] = {}
    for e in events:
        counts[e["type"]] = counts.get(e["type"], 0) + 1
    manifest = {k: v for k, v in lines[-1].items() if k != "signature"}
    manifest.update(events=len(events), blobs=0, counts=dict(sorted(counts.items())),
                    archive_id=str(uuid.uuid4()))
    rebuilt = _rechained([lines[0], *events, manifest])
    if sign_with is not None:  # over the manifest as re-chained
        last = orjson.loads(rebuilt[-1])
        rebuilt[-1] = orjson.dumps({**last, "signature": signing.sign(last, sign_with)}) + b"\n"
    _write(out, rebuilt)
    return out


async def bring(store: EventStore, tmp_path: Path, events: list[dict[str, Any]]) -> None:
    """`events` imported from a file of another database's (unsigned)."""
    template = tmp_path / f"template-{uuid.uuid4().hex[:6]}.jsonl.zst"
    await exports.export(store, exports.Selection(categories=("definition",)), template)
    path = write(tmp_path / f"brought-{uuid.uuid4().hex[:6]}.jsonl.zst", template, events)
    assert (await imports.import_archive(store, path)).imported == len(events)

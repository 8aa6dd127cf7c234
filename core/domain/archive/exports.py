"""Export a range of the log to a verifiable file, and verify such a file (`imports` appends
one to the log).

The file is zstd-compressed JSON lines, readable without props (`zstd -dc FILE | jq`):

    {"kind": "header", "format": "props-export", "version": 1, "selection": {...}}
    {"kind": "blob", "sha256": ..., "size": ..., "base64": ...}      # before its first use
    {"kind": "event", "position": ..., "event_id": ..., ...}   # every 1000th: "chain"
    {"kind": "manifest", "events": N, "blobs": M, "counts": {...}, "first": ..., "last": ...,
     "chain": <last chain>, "sha256": <sha256 of every line before this one>,
     "archive_id": <uuid>, "signature": {...}}                  # signature: `--sign KEY`

A hash chain runs across the events: link = sha256(previous link + the event line's bytes
without `chain`); every 1000th event line (and the manifest) carries the link, so an edit,
deletion, reordering or truncation is detected and located within 1,000 events, while the
file stays small (a link on every line would add 64 incompressible characters per event).
The manifest's sha256 covers every line before it, headers and blobs too; an Ed25519
signature over the manifest (props.core.domain.archive.signing) says who wrote the file, which
integrity alone cannot: anyone can write a file whose chain verifies.

An import verifies the whole file first and writes nothing unless every check passes: the
chain, the blobs, the manifest, the signature (a trusted signer, if asked), and every event
against the catalog (a known type that fails validation refuses the file, naming its line;
an unknown type refuses it unless allowed). Then it appends, keeping event ids and stream
versions (new global positions; the origin position, the archive's id and its signer in
metadata), skipping events already present, so a second import changes nothing and an
interrupted one finishes when run again. A snapshot version recorded before the version it
follows is refused: the ground truth in force at a time cannot be rewritten by backdating.
The import itself is recorded (`archive.imported`, with the critic runs it brought), so a
report can say how many of its runs came from which signer, and leave them out.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
import orjson
import zstandard
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from props.core.domain import canonical_ids, catalog
from props.core.domain.archive import export_lines, signing
from props.core.domain.archive.export_lines import MAX_LINE_BYTES
from props.core.domain.specimens import specimens
from props.core.log import errors, stopping
from props.core.log.events import EventRegistry
from props.core.log.store import EventStore
from props.schema import queries

FORMAT = "props-export"
VERSION = 1
_ARCHIVAL = queries.load("archival")
_SHA = re.compile(rb'"([0-9a-f]{64})"')
_GENESIS = "0" * 64
_IMPORT_NAMESPACE = uuid.UUID("9b6c3f0e-1d2a-4e57-b8c9-3a4f5e6d7c81")
_STREAM_ID = re.compile(r"^[a-z][a-z0-9_]*-.")
T = TypeVar("T")
U = TypeVar("U")
# (the reading side, bounded, is its module's; named here as every caller knows them)
ArchiveError = export_lines.ArchiveError
_lines, _parse = export_lines.read_lines, export_lines.parse_line



@dataclasses.dataclass(frozen=True)
class Selection:
    after_position: int = 0
    to_position: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    categories: tuple[str, ...] | None = None
    exclude_categories: tuple[str, ...] | None = None
    # Only these streams, and the streams that start so (an evaluation's: `evaluation`
    # names it in the file, the streams themselves are the file's content).
    evaluation: str | None = None
    stream_ids: tuple[str, ...] | None = None
    stream_prefixes: tuple[str, ...] | None = None

    def describe(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v)
                for k, v in dataclasses.asdict(self).items()
                if v not in (None, 0) and k not in ("stream_ids", "stream_prefixes")}


@dataclasses.dataclass
class ExportReport:
    events: int = 0
    blobs: int = 0
    bytes_in: int = 0  # raw event JSON (data + metadata)
    bytes_out: int = 0


def _line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n"


CHAIN_EVERY = 1000
# Level 16 with long-distance matching: within 10% of `zstd -19` in size at 60% of level 17's
# time (measured on the export bench's log: 1.085x vs 1.07x the size, 2.2 s vs 3.7 s on one
# core), on worker threads in 1 MiB jobs with a small overlap, so both cores compress while
# the reading goes on (1.3-1.8 s vs 2.0-2.5 s with 2 MiB jobs and the default overlap; the
# same size).
COMPRESSION = zstandard.ZstdCompressionParameters.from_level(
    16, enable_ldm=True, threads=-1, job_size=1 << 20, overlap_log=5, write_checksum=True)


def _link(previous: str, body: bytes) -> str:
    """The chain's next link: over the previous one and the event's line without its own."""
    return hashlib.sha256(previous.encode() + body).hexdigest()


def _chained(obj: dict[str, Any], previous: str, n: int) -> tuple[bytes, str]:
    """The event's line, and the next link; the `n`th event's line shows the link every
    CHAIN_EVERY events."""
    body = _line(obj)
    chain = _link(previous, body)
    if n % CHAIN_EVERY == 0:
        return _line({**obj, "chain": chain}), chain
    return body, chain


async def export(store: EventStore, selection: Selection, out: Path,
                 progress: Callable[[int], None] | None = None,
                 sign_with: Ed25519PrivateKey | None = None) -> ExportReport:
    """Write the selected events (and the blobs they reference) to `out`, atomically;
    signed by `sign_with` when given."""
    report = ExportReport()
    tmp = out.with_name(out.name + ".partial")
    content = hashlib.sha256()
    raw = await anyio.to_thread.run_sync(tmp.open, "wb")
    sink = zstandard.ZstdCompressor(compression_params=COMPRESSION).stream_writer(raw)

    async def emit(lines: list[bytes], hashed: bool = True) -> None:
        data = b"".join(lines)
        if hashed:
            content.update(data)
        await anyio.to_thread.run_sync(sink.write, data)  # compression off the event loop

    try:
        await emit([_line({"kind": "header", "format": FORMAT, "version": VERSION,
                           "selection": selection.describe()})])
        chain = _GENESIS
        counts: Counter[str] = Counter()
        first: dict[str, Any] | None = None
        last: dict[str, Any] | None = None
        checked: set[str] = set()
        async for page in _pages(store, selection):
            lines: list[bytes] = []
            wanted = sorted({m.decode() for r in page for m in _SHA.findall(r.data.encode())}
                            - checked)
            # 64-hex values that are not blobs (code hashes, ...) are simply not found.
            found = await store.get_blobs(wanted) if wanted else {}
            checked.update(wanted)  # found or not: a hash is looked up once per export
            for sha, payload in sorted(found.items()):
                lines.append(_line({"kind": "blob", "sha256": sha, "size": len(payload),
                                    "base64": base64.b64encode(payload).decode()}))
                if len(lines[-1]) > MAX_LINE_BYTES:  # no reader would take the file
                    raise ArchiveError(f"blob {sha} is {len(payload):,} bytes: past what "
                                       f"one line of an export may hold ({MAX_LINE_BYTES:,} "
                                       f"bytes once encoded); nothing was exported")
                report.blobs += 1
            for r in page:
                event = {"kind": "event", "position": r.global_position,
                         "tx_id": r.tx_id, "event_id": str(r.event_id),
                         "stream_id": r.stream_id,
                         "stream_version": r.stream_version, "type": r.type,
                         "schema_version": r.schema_version,
                         "data": orjson.loads(r.data),
                         "metadata": orjson.loads(r.metadata),
                         "recorded_at": r.recorded_at.isoformat()}
                line, chain = _chained(event, chain, report.events + 1)
                lines.append(line)
                counts[r.type] += 1
                report.events += 1
                report.bytes_in += len(r.data) + len(r.metadata)
                mark = {"position": r.global_position, "event_id": str(r.event_id)}
                first = first or mark
                last = mark
            await emit(lines)
            if progress:
                progress(len(page))
        manifest = {"kind": "manifest", "events": report.events, "blobs": report.blobs,
                    "counts": dict(sorted(counts.items())), "first": first, "last": last,
                    "chain": chain, "sha256": content.hexdigest(),
                    "selection": selection.describe(), "archive_id": str(uuid.uuid4())}
        if sign_with is not None:
            manifest["signature"] = signing.sign(manifest, sign_with)
        await emit([_line(manifest)], hashed=False)
    except BaseException:
        with stopping.shield(f"the export's partial file {tmp}: its removal"):
            await anyio.to_thread.run_sync(sink.close)
            await anyio.to_thread.run_sync(lambda: tmp.unlink(missing_ok=True))
        raise
    else:
        # Finished as one step: a cancel here (Ctrl-C, SIGTERM) leaves the whole file, never
        # its .partial beside nothing.
        with stopping.shield(f"the export {out}: its completion"):
            await anyio.to_thread.run_sync(sink.close)  # also closes the file
            await anyio.to_thread.run_sync(tmp.replace, out)
    report.bytes_out = (await anyio.to_thread.run_sync(out.stat)).st_size
    return report


@dataclasses.dataclass(slots=True)  # not frozen: a frozen one costs 50% more per event
class _Stored:
    """An event as the log stores it, its payloads as their JSON text."""

    global_position: int
    tx_id: int
    event_id: uuid.UUID
    stream_id: str
    stream_version: int
    type: str
    schema_version: int
    data: str
    metadata: str
    recorded_at: datetime


_EXPORT_PAGE = queries.typed("exports", "export_page", _Stored)


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def _pages(store: EventStore, s: Selection) -> AsyncIterator[list[_Stored]]:
    after = s.after_position
    while True:
        page = await store.sql.rows(
            _EXPORT_PAGE, after, s.to_position, s.since, s.until,
            list(s.categories) if s.categories else None,
            list(s.exclude_categories) if s.exclude_categories else None,
            None if s.stream_ids is None else list(s.stream_ids),
            None if s.stream_prefixes is None else [_like(p) for p in s.stream_prefixes],
            1000)
        if not page:
            return
        yield page
        after = page[-1].global_position


# -- reading and verifying ---------------------------------------------------------------------


@dataclasses.dataclass
class Verified:
    events: int
    blobs: int
    counts: dict[str, int]
    manifest: dict[str, Any]


def verify(path: Path, registry: EventRegistry = catalog.REGISTRY,
           allow_unknown: bool = False) -> Verified:
    """Check the whole archive: header, every chain link, blob hashes, every event against
    the catalog, the manifest (not the signature: see `signing.signer`)."""
    state = _Verifier(path, registry, allow_unknown)
    lines = _lines(path)
    while _next_checked(state, lines, 10_000):
        pass
    return state.finish()


class _Verifier:
    def __init__(self, path: Path, registry: EventRegistry, allow_unknown: bool) -> None:
        self.path = path
        self.registry = registry
        self.allow_unknown = allow_unknown
        self.content = hashlib.sha256()
        self.chain = _GENESIS
        self.counts: Counter[str] = Counter()
        self.events = 0
        self.blobs = 0
        self.manifest: dict[str, Any] | None = None

    def check(self, number: int, line: bytes) -> tuple[str, bytes | None]:
        """Check one line; return its kind, and a blob's content. The parsed line is not
        kept: holding thousands of parsed events would wake the cyclic GC for nothing."""
        where = f"{self.path}:{number}"
        if self.manifest is not None:
            raise ArchiveError(f"{where}: data after the manifest; nothing was written")
        obj = _parse(self.path, number, line)
        kind = obj["kind"]
        if number == 1:
            if kind != "header" or obj.get("format") != FORMAT:
                raise ArchiveError(f"{where}: not a props export (no header)")
            if obj.get("version") != VERSION:
                raise ArchiveError(f"{where}: archive format version {obj.get('version')}; "
                                   f"this props reads version {VERSION}: upgrade props")
        elif kind == "header":
            raise ArchiveError(f"{where}: a second header")
        payload = None
        if kind == "manifest":
            self.manifest = obj
            return kind, payload
        self.content.update(line)
        if kind == "blob":
            payload = base64.b64decode(obj["base64"], validate=True)
            if hashlib.sha256(payload).hexdigest() != obj["sha256"]:
                raise ArchiveError(f"{where}: blob content does not match its sha256")
            self.blobs += 1
        elif kind == "event":
            claimed = obj.pop("chain", None)
            self.events += 1
            # A line without a link is hashed as it stands: the exporter wrote exactly the
            # bytes it linked, so any other spelling of the same event breaks the chain too.
            expected = _link(self.chain, line if claimed is None else _line(obj))
            shown = self.events % CHAIN_EVERY == 0
            if shown != (claimed is not None) or (shown and claimed != expected):
                raise ArchiveError(
                    f"{where}: the hash chain breaks at event {obj.get('event_id')}: an event "
                    f"in the {CHAIN_EVERY} before it was changed, removed or reordered; "
                    f"nothing was written")
            self.chain = expected
            self._check_event(where, obj)
            self.counts[str(obj["type"])] += 1
        elif kind != "header":
            raise ArchiveError(f"{where}: unknown line kind {kind!r}")
        return kind, payload

    def _check_event(self, where: str, obj: dict[str, Any]) -> None:
        """The event as the log would take it: a stream name of the log's shape, metadata
        an object, and data the catalog accepts (an import never writes what a rebuild or
        a reader would then fail on, for good)."""
        type_name, version = obj.get("type"), obj.get("schema_version")
        if not isinstance(obj.get("stream_id"), str) or not _STREAM_ID.match(obj["stream_id"]):
            raise ArchiveError(f"{where}: stream id {str(obj.get('stream_id'))[:80]!r} is not "
                               f"CATEGORY-ID; nothing was written")
        loose = canonical_ids.loose_stream_id(obj["stream_id"])
        if loose is not None or not canonical_ids.is_canonical(obj.get("event_id")):
            what = (f"stream id {obj['stream_id'][:80]!r}" if loose is not None
                    else f"event id {str(obj.get('event_id'))[:80]!r}")
            raise ArchiveError(f"{where}: {what} is not a UUID as props writes it (lower "
                               f"case, 8-4-4-4-12); nothing was written")
        if not isinstance(obj.get("metadata"), dict):
            raise ArchiveError(f"{where}: metadata is not an object; nothing was written")
        if not isinstance(type_name, str) or not isinstance(version, int) or \
                isinstance(version, bool):
            raise ArchiveError(f"{where}: an event needs a type and a schema version; "
                               f"nothing was written")
        if self.registry.get(type_name) is None:
            if self.allow_unknown:
                return
            raise ArchiveError(f"{where}: unknown event type {type_name[:80]!r} (import with "
                               f"--allow-unknown to take it as it is); nothing was written")
        try:
            event = self.registry.validate_stored(type_name, version, obj.get("data"))
        except errors.InvalidEvent as exc:
            raise ArchiveError(f"{where}: {str(exc)[:500]}; nothing was written") from None
        loose_id = canonical_ids.loose_id(event, obj.get("data"))
        if loose_id is not None:
            raise ArchiveError(f"{where}: {loose_id[0]} {str(loose_id[1])[:80]!r} is not a UUID as "
                               f"props writes it (lower case, 8-4-4-4-12); nothing was written")
        if type_name == catalog.SnapshotSynced.type_name and \
                isinstance(event, catalog.SnapshotSynced) and \
                specimens.ground_truth_hash(event.ground_truth) != event.ground_truth_hash:
            raise ArchiveError(f"{where}: snapshot.synced of {event.slug} version "
                               f"{event.version}: its ground_truth_hash is not the hash of the "
                               f"ground truth it carries; nothing was written")

    def finish(self) -> Verified:
        manifest = self.manifest
        if manifest is None:
            raise ArchiveError(f"{self.path}: no manifest at the end: the archive is "
                               f"truncated; nothing was written")
        for key, actual in (("events", self.events), ("blobs", self.blobs),
                            ("chain", self.chain), ("sha256", self.content.hexdigest()),
                            ("counts", dict(sorted(self.counts.items())))):
            if manifest.get(key) != actual:
                raise ArchiveError(f"{self.path}: manifest {key} does not match the content; "
                                   f"nothing was written")
        return Verified(self.events, self.blobs, dict(self.counts), manifest)


def _next_checked(state: _Verifier, lines: Iterator[tuple[int, bytes]],
                  n: int) -> list[tuple[int, bytes, str, bytes | None]]:
    """The next `n` event or blob lines (number, bytes, kind, blob content), each checked on
    the way (raises on the first bad one)."""
    out = []
    for number, line in lines:
        try:
            kind, payload = state.check(number, line)
        except ArchiveError:
            raise
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ArchiveError(f"{state.path}:{number}: malformed line ({exc!r}); nothing was "
                               f"written") from exc
        if kind in ("event", "blob"):
            out.append((number, line, kind, payload))
            if len(out) >= n:
                break
    return out

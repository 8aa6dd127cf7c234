"""Export a range of the log to a verifiable file, and verify such a file (`imports` appends
one to the log).

The file is zstd-compressed JSON lines, readable without props (`zstd -dc FILE | jq`):

    {"kind": "header", "format": "props-export", "version": 2, "event_fields": [...], ...}
    {"kind": "blob", "sha256": ..., "size": ..., "base64": ...}      # before its first use
    [1, 0, "<event id>", "run-...", 3, "issue.reported", 1, {...}, {...}, null]  # an event
    {"kind": "manifest", "events": N, "blobs": M, "counts": {...}, "first": ..., "last": ...,
     "chain": <last chain>, "sha256": <sha256 of every line before this one>,
     "archive_id": <uuid>, "signature": {...}}                  # signature: `--sign KEY`

An event line is an array of `event_lines.FIELDS`, written against the event before it
(its position and transaction as steps, its time null when unchanged: event_lines). Version 1
files (every event an object with those keys, and `kind`) are still read.

A hash chain runs across the events: link = sha256(previous link + the event line's bytes
without its link); every 1000th event line (and the manifest) carries the link, so an edit,
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
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
import orjson
import zstandard
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from props.core.domain import canonical_ids, catalog
from props.core.domain.archive import event_lines, export_lines, signing
from props.core.domain.archive.export_lines import MAX_LINE_BYTES
from props.core.domain.catalog.parts import INT32
from props.core.domain.specimens import specimens
from props.core.log import batches, errors, stopping
from props.core.log.events import EventRegistry
from props.core.log.store import EventStore
from props.schema import queries

FORMAT = "props-export"
VERSION = 2
READS = (1, 2)  # version 1: props before 2026-12-08, every event an object
_ARCHIVAL = queries.load("archival")
_EXPORTS = queries.load("exports")
_SHA = re.compile(rb'"([0-9a-f]{64})"')
_GENESIS = "0" * 64
_IMPORT_NAMESPACE = uuid.UUID("9b6c3f0e-1d2a-4e57-b8c9-3a4f5e6d7c81")
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


# An event as an import stages it: its fields as a JSON array in `event_lines.FIELDS`' places
# (the steps and the time there are not read), and its position, transaction and time whole.
StagedEvent = tuple[bytes, int, int | None, datetime]
MAX_BIGINT = 2**63 - 1  # a position, a transaction


def _time(text: str) -> datetime:
    """An event's time as a file spells it: ISO 8601 with its offset from UTC, the time the
    server stores. (PostgreSQL reads more, `now`, `epoch`, a time in its own zone, a year BC
    that no reader of the log can then decode: none is a recorded time.)"""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"time {text[:40]!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise ValueError(f"time {text[:40]!r} has no offset from UTC")
    return at


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    """A version 1 event line's object, its position, transaction and time of the types
    staging takes (ValueError: not)."""
    position, tx_id, recorded_at = obj.get("position"), obj.get("tx_id"), obj.get("recorded_at")
    if type(position) is not int:
        raise ValueError(f"position {str(position)[:40]!r} is not a whole number")
    if tx_id is not None and type(tx_id) is not int:
        raise ValueError(f"transaction {str(tx_id)[:40]!r} is not a whole number")
    if type(recorded_at) is not str:
        raise ValueError(f"time {str(recorded_at)[:40]!r} is not a string")
    return obj


def _link(previous: str, body: bytes) -> str:
    """The chain's next link: over the previous one and the event's line without its own."""
    return hashlib.sha256(previous.encode() + body).hexdigest()


class EventChain:
    """Events as the exporter writes them: each line against the one before it, the hash
    chain run across them, every CHAIN_EVERY-th line showing its link."""

    def __init__(self) -> None:
        self.steps = event_lines.Steps()
        self.link = _GENESIS
        self.events = 0

    def line(self, event: Sequence[Any]) -> bytes:
        """The line of an event given as its values in `event_lines.FIELDS` order."""
        body = self.steps.encode(event)
        self.link = _link(self.link, body)
        self.events += 1
        return event_lines.with_link(body, self.link) if self.events % CHAIN_EVERY == 0 \
            else body


async def export(store: EventStore, selection: Selection, out: Path,
                 progress: Callable[[int], None] | None = None,
                 sign_with: Ed25519PrivateKey | None = None) -> ExportReport:
    """Write the selected events (and the blobs they reference) to `out`, atomically;
    signed by `sign_with` when given."""
    await _refuse_unknown_categories(store, selection)
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
                           "event_fields": event_lines.FIELDS,
                           "selection": selection.describe()})])
        chain = EventChain()
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
                # data and metadata as the log stores their JSON: written, never re-parsed
                lines.append(chain.line((
                    r.global_position, r.tx_id, str(r.event_id), r.stream_id,
                    r.stream_version, r.type, r.schema_version, orjson.Fragment(r.data),
                    orjson.Fragment(r.metadata), r.recorded_at.isoformat())))
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
                    "chain": chain.link, "sha256": content.hexdigest(),
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


async def _refuse_unknown_categories(store: EventStore, selection: Selection) -> None:
    """A category the selection names that no event is in: refused before anything is
    written (a typo in an exclusion would otherwise export what it meant to leave out)."""
    named = sorted({*(selection.categories or ()), *(selection.exclude_categories or ())})
    if not named:
        return
    unknown = [r[0] for r in await store.sql.fetch(_EXPORTS["unknown_categories"], named)]
    if unknown:
        known = [r[0] for r in await store.sql.fetch(_EXPORTS["categories"])]
        raise errors.NotFound(
            f"no event of the log is in category {_listed(list(map(repr, unknown)), 10)}; the "
            f"log's categories: {_listed(known, 50) or 'none'}; nothing was exported")


def _listed(names: list[str], most: int) -> str:
    """Names for one line: the first `most`, and how many more."""
    more = f" and {len(names) - most:,} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


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


def objects(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """Each of a file's lines as an object, unchecked (`verify` checks): an event by field
    name (`kind` "event"), its position, transaction and time whole and its chain link left
    out, whichever format version wrote it."""
    steps = event_lines.Steps()
    for line in lines:
        obj = orjson.loads(line)
        if isinstance(obj, list):
            event_lines.split_link(line, obj)
            yield {"kind": "event", **steps.decode(obj)}
        else:
            if obj.get("kind") == "event":
                obj.pop("chain", None)
            yield obj


@dataclasses.dataclass
class Verified:
    events: int
    blobs: int
    counts: dict[str, int]
    manifest: dict[str, Any]
    version: int  # the file's format


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
        self.version = 0  # the header's
        self.steps = event_lines.Steps()  # version 2: what each event line is read against
        self.time_text, self.time = "", datetime.min  # the last event's time, as read
        self.linked_line = 0  # the last event line that showed its link

    def check(self, number: int, line: bytes) -> tuple[str, bytes | StagedEvent | None]:
        """Check one line; return its kind, and a blob's content or an event as staging
        takes it. The parsed line is not kept: holding thousands of parsed events would
        wake the cyclic GC for nothing."""
        where = f"{self.path}:{number}"
        if self.manifest is not None:
            raise ArchiveError(f"{where}: data after the manifest; nothing was written")
        obj = _parse(self.path, number, line)
        if isinstance(obj, list):  # version 2's event line
            if self.version != 2:
                raise ArchiveError(f"{where}: not a props export (no header)" if number == 1
                                   else f"{where}: not an archive line; nothing was written")
            self.content.update(line)
            return "event", self._event(number, line, obj)
        kind = obj["kind"]
        if number == 1:
            if kind != "header" or obj.get("format") != FORMAT:
                raise ArchiveError(f"{where}: not a props export (no header)")
            if type(obj.get("version")) is not int or obj["version"] not in READS:
                raise ArchiveError(f"{where}: archive format version {obj.get('version')}; "
                                   f"this props reads versions {', '.join(map(str, READS))}: "
                                   f"upgrade props")
            self.version = obj["version"]
            if self.version == 2 and obj.get("event_fields") != list(event_lines.FIELDS):
                raise ArchiveError(f"{where}: the header's event_fields are not "
                                   f"{', '.join(event_lines.FIELDS)}: not a file this props "
                                   f"reads; nothing was written")
        elif kind == "header":
            raise ArchiveError(f"{where}: a second header")
        payload: bytes | StagedEvent | None = None
        if kind == "manifest":
            self.manifest = obj
            return kind, payload
        self.content.update(line)
        if kind == "blob":
            payload = base64.b64decode(obj["base64"], validate=True)
            if hashlib.sha256(payload).hexdigest() != obj["sha256"]:
                raise ArchiveError(f"{where}: blob content does not match its sha256")
            self.blobs += 1
        elif kind == "event" and self.version == 1:
            payload = self._event(number, line, obj)
        elif kind != "header":
            raise ArchiveError(f"{where}: unknown line kind {kind!r}")
        return kind, payload

    def _event(self, number: int, line: bytes, obj: dict[str, Any] | list[Any]) -> StagedEvent:
        """Check the event line `number` (an array in version 2, an object in version 1): its
        link, then the event itself. Returns the event as staging takes it."""
        where = f"{self.path}:{number}"
        if isinstance(obj, list):
            body, claimed = event_lines.split_link(line, obj)
        else:
            claimed = obj.pop("chain", None)
            body = line if claimed is None else _line(obj)
        self.events += 1
        # A line without a link is hashed as it stands: the exporter wrote exactly the
        # bytes it linked, so any other spelling of the same event breaks the chain too.
        expected = _link(self.chain, body)
        shown = self.events % CHAIN_EVERY == 0
        if shown != (claimed is not None) or (shown and claimed != expected):
            raise ArchiveError(
                f"{where}: the hash chain breaks at event {self.events:,}: an event in the "
                f"{CHAIN_EVERY} before it was changed, removed or reordered; nothing was "
                f"written")
        self.chain = expected
        if shown:
            self.linked_line = number
        try:
            event = self.steps.decode(obj) if isinstance(obj, list) else _whole(obj)
            if not 1 <= event["position"] <= MAX_BIGINT:
                raise ValueError(f"position {event['position']} is not from 1 to "
                                 f"{MAX_BIGINT:,} (PostgreSQL's bigint)")
            if event.get("tx_id") is not None and not 0 <= event["tx_id"] <= MAX_BIGINT:
                raise ValueError(f"transaction {event['tx_id']} is not from 0 to "
                                 f"{MAX_BIGINT:,} (PostgreSQL's bigint)")
            if event["recorded_at"] != self.time_text:  # (most events: their previous's)
                self.time, self.time_text = _time(event["recorded_at"]), event["recorded_at"]
        except ValueError as exc:
            raise ArchiveError(f"{where}: {exc}; nothing was written") from None
        self._check_event(where, event)
        self.counts[str(event["type"])] += 1
        # A version 2 line goes to the server as the chain hashed it (its fields by place);
        # a version 1 event is written so (once: only an old file pays it).
        fields = body.removesuffix(b"\n") if isinstance(obj, list) else orjson.dumps(
            [None, None, *(event[f] for f in event_lines.FIELDS[2:9]), None])
        return fields, event["position"], event.get("tx_id"), self.time

    def _check_event(self, where: str, obj: dict[str, Any]) -> None:
        """The event as the log would take it: a stream name of the log's shape, metadata
        an object, and data the catalog accepts (an import never writes what a rebuild or
        a reader would then fail on, for good)."""
        type_name, version = obj.get("type"), obj.get("schema_version")
        if not isinstance(obj.get("stream_id"), str) or \
                not batches.STREAM_ID.match(obj["stream_id"]):
            raise ArchiveError(f"{where}: stream id {str(obj.get('stream_id'))[:80]!r} is not "
                               f"CATEGORY-ID; nothing was written")
        loose = canonical_ids.loose_stream_id(obj["stream_id"])
        if loose is not None or not canonical_ids.is_canonical(obj.get("event_id")):
            what = (f"stream id {obj['stream_id'][:80]!r}" if loose is not None
                    else f"event id {str(obj.get('event_id'))[:80]!r}")
            raise ArchiveError(f"{where}: {what} is not a UUID as props writes it (lower "
                               f"case, 8-4-4-4-12); nothing was written")
        stream_version = obj.get("stream_version")
        if type(stream_version) is not int or not 1 <= stream_version <= INT32:
            raise ArchiveError(f"{where}: stream version {str(stream_version)[:40]!r} is not a "
                               f"whole number from 1 to {INT32:,}; nothing was written")
        for part in ("data", "metadata"):  # (the log's own constraint, said here by line)
            if not isinstance(obj.get(part), dict):
                raise ArchiveError(f"{where}: {part} is not an object; nothing was written")
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
        said = {
            "events": f"the manifest counts {manifest.get('events')} event(s), the file holds "
                      f"{self.events:,}: an event line was removed or added",
            "blobs": f"the manifest counts {manifest.get('blobs')} blob(s), the file holds "
                     f"{self.blobs:,}: a blob line was removed or added",
            "chain": f"the hash chain breaks after "
                     f"{f'line {self.linked_line}' if self.linked_line else 'the header'}, "
                     f"its last link shown: an event after it was changed, removed or "
                     f"reordered",
            "sha256": "the manifest's sha256 is not that of the lines before it: a line was "
                      "changed",
            "counts": "the manifest's counts by type are not the events'"}
        for key, actual in (("events", self.events), ("blobs", self.blobs),
                            ("chain", self.chain), ("sha256", self.content.hexdigest()),
                            ("counts", dict(sorted(self.counts.items())))):
            if manifest.get(key) != actual:
                raise ArchiveError(f"{self.path}: {said[key]}; nothing was written")
        return Verified(self.events, self.blobs, dict(self.counts), manifest, self.version)


def _next_checked(state: _Verifier, lines: Iterator[tuple[int, bytes]], n: int,
                  max_bytes: int = MAX_LINE_BYTES) -> list[tuple[int, bytes | StagedEvent]]:
    """The next `n` event or blob lines (number, and the blob's content or the event as
    staging takes it), fewer once they hold `max_bytes`, each checked on the way (raises on
    the first bad one)."""
    out = []
    held = 0
    for number, line in lines:
        try:
            kind, payload = state.check(number, line)
        except ArchiveError:
            raise
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise ArchiveError(f"{state.path}:{number}: malformed line ({exc!r}); nothing was "
                               f"written") from exc
        if kind in ("event", "blob"):
            assert payload is not None  # (an event's or a blob's)
            out.append((number, payload))
            held += len(line)
            if len(out) >= n or held >= max_bytes:
                break
    return out

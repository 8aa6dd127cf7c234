"""Import an export file: verify it whole while staging it, then append what is missing.

An import verifies the whole file first and writes nothing unless every check passes: the
chain, the blobs, the manifest, the signature (a trusted signer, if asked), and every event
against the catalog (`exports` verifies). Then it appends, keeping event ids and stream
versions (new global positions; the origin position, the archive's id and its signer in
metadata), skipping events already present, so a second import changes nothing and an
interrupted one finishes when run again. An archive file (`props archive`) puts its
partition back as it was instead.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import orjson

from props.core.domain import catalog, streams
from props.core.domain.archive import signing, trust
from props.core.domain.archive.exports import (
    ArchiveError,
    Verified,
    _lines,
    _next_checked,
    _Verifier,
)
from props.core.log import blobs, bulk, errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore, StoreTransaction
from props.schema import queries

_Q = queries.load("exports")
_ARCHIVAL = queries.load("archival")
_EVENTS = queries.load("events")  # the log's: its partitions, its blobs
_IMPORT_NAMESPACE = uuid.UUID("9b6c3f0e-1d2a-4e57-b8c9-3a4f5e6d7c81")
T = TypeVar("T")
U = TypeVar("U")


@dataclasses.dataclass
class ImportReport:
    events: int = 0
    imported: int = 0
    already_present: int = 0
    blobs: int = 0
    restored: str | None = None  # the archived partition this file put back
    signer: str | None = None  # the fingerprint of the key that signed it (None: unsigned)
    # `open` (this deployment trusts no signer), `trusted`, or `untrusted` (kept whole as
    # inert history: props.core.domain.archive.trust)
    trust: trust.Trust = "open"
    inert: int = 0  # events kept as inert history (`inert`), none of them acting here
    # The origin's records of its own consumers, by type: appended in place as history
    # (`scorer.activated`, `run.excluded` of a run it brings) or kept as `import.inert`
    # (its parks, retries, holds, launchers). Nothing here acts on either.
    history: dict[str, int] = dataclasses.field(default_factory=dict)
    kept_inert: dict[str, int] = dataclasses.field(default_factory=dict)


RUNS_PER_RECORD = 5000


async def _record_import(tx: StoreTransaction, archive_id: str, sha256: str,
                         signer: str | None, events: int, imported: int,
                         runs: list[uuid.UUID]) -> None:
    """The import as events of its own stream, with the critic runs it brought (in parts:
    an event stays small)."""
    parts = [runs[i:i + RUNS_PER_RECORD] for i in range(0, len(runs), RUNS_PER_RECORD)] or [[]]
    await tx.append(streams.imported(archive_id), [NewEvent(
        catalog.ArchiveImported(archive_id=archive_id, sha256=sha256, signer=signer,
                                events=events, imported=imported, part=n,
                                runs=[catalog.ImportedRun(run_id=r) for r in part]),
        uuid.uuid5(_IMPORT_NAMESPACE, f"{archive_id}:{sha256}:{n}"), {"actor": "import"})
        for n, part in enumerate(parts, start=1)])


async def import_archive(store: EventStore, path: Path,
                         progress: Callable[[int], None] | None = None, *,
                         trusted: list[signing.PublicKey] | None = None,
                         allow_unknown: bool = False, inert: bool = False,
                         adopt_snapshots: bool = False, untrusted: bool = False,
                         ) -> ImportReport:
    """Verify `path` while staging it in temporary tables, then, only if every check passed,
    append in one transaction what the database does not have yet.

    The file is read once, in a pipeline: a worker thread decompresses and checks the next
    chunk while the server parses the previous one into the staging table (each event line
    goes over as the JSON text that was hashed; the server, on its own core, takes its fields
    apart). Staging is not the log: if verification fails, the temporary tables go with the
    session and nothing was written.

    What the file may bring is checked last, against this database, before anything is
    written (props.import_staged): an event that acts on this database's own streams or runs
    refuses the file, naming its line (`inert`: kept as `import.inert` history instead).
    The origin's records of its own consumers are history here, whatever `inert` says
    (`ImportReport.history`, `kept_inert`; docs/reference/imports.md). `adopt_snapshots`:
    its snapshot versions may grade this database's own runs (specimen_sync). A file none of
    the deployment's trusted signers signed is refused, or with `untrusted` kept whole as
    inert history (trust.decide).
    """
    report = ImportReport()
    state = _Verifier(path, store.registry, allow_unknown)
    lines = _lines(path)
    async with store.sql.acquire() as conn:
        await conn.execute(_Q["stage_tables"])
        try:
            # Checking parses every line: with the GC on, each collection would walk the
            # caller's whole heap, however large, for lines that are dropped at once.
            with bulk.gc_paused():
                chunk = await anyio.to_thread.run_sync(_next_staged, state, lines)
                while chunk.events or chunk.blobs:
                    following, _ = await _together(
                        anyio.to_thread.run_sync(_next_staged, state, lines),
                        _stage(conn, path, chunk))
                    if progress:
                        progress(len(chunk.events))
                    chunk = following
            verified = state.finish()  # raises before anything is written
            report.events, report.blobs = verified.events, verified.blobs
            archived = await conn.fetchrow(_ARCHIVAL["archived_by_sha"],
                                           verified.manifest["sha256"])
            if archived is not None:  # an archived partition of this database: restore it
                report.imported = await _restore(conn, archived["name"])
                report.restored = archived["name"]
                return report
            report.signer = signing.signer(verified.manifest, trusted)
            report.trust = "trusted" if trusted is not None else trust.decide(
                report.signer, await trust.trusted(store), untrusted=untrusted)
            await _refuse_before_writing(conn, path)
            await conn.fetchval(_EVENTS["ensure_partitions"], report.events)
            try:
                with errors.refused():
                    inserted = await _insert_staged(
                        store, conn, verified, report,
                        Admit(path, inert, adopt_snapshots, report.trust == "untrusted"))
            except errors.StreamGap as exc:
                raise errors.PropsError(
                    f"{path}: its streams continue events this database does not have "
                    f"({exc}); import the range before it first. Nothing was written."
                ) from exc
            report.imported = inserted
            report.already_present = report.events - inserted - report.inert
        finally:
            await conn.execute(_Q["drop_stage_tables"])
    return report


async def _refuse_before_writing(conn: Any, path: Path) -> None:
    """Refuse a staged file that gives an event id twice, whose snapshot versions are
    backdated or out of their slug's stream, or whose events are recorded in the future
    (before anything is written)."""
    repeated = await conn.fetchrow(_Q["repeated_event_ids"])
    if repeated is not None:
        raise ArchiveError(
            f"{path}:{repeated['again_line']}: event id {repeated['event_id']} again (first at "
            f"line {repeated['first_line']}): an event is recorded once; nothing was written")
    backdated = await conn.fetchrow(_Q["backdated_snapshots"])
    if backdated is not None:
        raise ArchiveError(
            f"{path}: {backdated['stream_id']} version {backdated['stream_version']} "
            f"is recorded before the version it follows: a backdated ground truth; "
            f"nothing was written")
    misfiled = await conn.fetchrow(_Q["misfiled_snapshots"])
    if misfiled is not None:
        raise ArchiveError(
            f"{path}:{misfiled['line']}: {misfiled['type']} in "
            f"{misfiled['stream_id'][:80]} is not in its slug's stream (snapshot-SLUG "
            f"of its data.slug): it would act on that snapshot; nothing was written")
    future = await conn.fetchrow(_Q["future_events"])
    if future is not None:
        raise ArchiveError(
            f"{path}: {future['stream_id']} version {future['stream_version']} is "
            f"recorded in the future ({future['recorded_at']}); nothing was written")


@dataclasses.dataclass(frozen=True)
class Admit:
    """What the operator said of a file's events that would act on this database."""

    path: Path
    inert: bool = False  # keep them as inert history instead of refusing the file
    adopt_snapshots: bool = False  # its snapshot versions may grade this database's runs
    untrusted: bool = False  # keep every event as inert history (trust.decide)


REFUSED_BECAUSE = {
    "own_stream": "appends to a stream holding events of this database's own",
    "other_origin": "continues a stream an import of another origin (another signer) brought",
    "own_run": "names critic run {run} of this database's own",
}


async def _insert_staged(store: EventStore, conn: Any, verified: Verified,
                         report: ImportReport, admit: Admit) -> int:
    """The staged events and blobs into the log, and the import's record, in one
    transaction: how many events were new. What the file may not bring is looked for first
    (by the owner's function), and refuses the file before anything is written."""
    async with conn.transaction():
        runs = [r[0] for r in await conn.fetch(_Q["staged_new_runs"])]
        origin: dict[str, Any] = {"archive": str(verified.manifest.get("archive_id")
                                                 or verified.manifest["sha256"]),
                                  "signer": report.signer or "unsigned"}
        if admit.adopt_snapshots:
            origin["ground_truth"] = "adopted"
        if admit.untrusted:
            origin["trust"] = "untrusted"
        try:
            with errors.refused():
                done = await conn.fetchrow(_Q["import_staged"], orjson.dumps(origin).decode(),
                                           admit.inert)
        except errors.PrivilegeRequired as exc:
            raise errors.ConfigurationError(
                "an import is the owner's: run `props import` with the owner's DSN "
                "(PROPS_DSN); nothing was written") from exc
        if done["refused_line"] is not None and not (admit.inert or admit.untrusted):
            why = REFUSED_BECAUSE[done["refused_reason"]].format(run=done["refused_run"])
            raise ArchiveError(
                f"{admit.path}:{done['refused_line']}: {done['refused_type']} in "
                f"{done['refused_stream'][:80]} {why}: an import adds, it never changes what "
                f"is this database's; nothing was written (`props import --inert` keeps such "
                f"events as history that nothing acts on)")
        for row in await conn.fetch(_Q["import_history"]):
            kept = report.history if row["reason"] == "history" else report.kept_inert
            kept[row["type"]] = row["events"]
        await conn.execute(_EVENTS["insert_staged_blobs"])
        inserted, report.inert = int(done["appended"]), int(done["inert"])
        if inserted or report.inert:
            await _record_import(StoreTransaction(store, conn), origin["archive"],
                                 verified.manifest["sha256"], report.signer,
                                 report.events, inserted, runs)
    return inserted


async def _together(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Await both at once; when one fails, still wait for the other (it may be using the
    connection) before raising the first failure, unwrapped."""
    results: list[Any] = [None, None]
    failures: list[Exception | None] = [None, None]

    async def run(i: int, work: Awaitable[Any]) -> None:
        try:
            results[i] = await work
        except Exception as exc:  # raised below, the first's first, once both are done
            failures[i] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, first, name="props-import-first")
        tg.start_soon(run, 1, second, name="props-import-second")
    for failure in failures:
        if failure is not None:
            raise failure
    return results[0], results[1]


async def _stage(conn: Any, path: Path, chunk: _Staged) -> None:
    if chunk.events:
        try:
            with errors.refused():
                await conn.execute(_Q["stage_events"],
                                   (b"[" + b",".join(chunk.events) + b"]").decode(),
                                   chunk.positions, chunk.tx_ids, chunk.times, chunk.lines)
        except (errors.ValueRefused, errors.AlreadyExists) as exc:
            raise ArchiveError(f"{path}: lines {chunk.first_line}-{chunk.last_line}: an event "
                               f"with a malformed field ({exc}); nothing was written") from None
    if chunk.blobs:
        await conn.copy_records_to_table("import_blobs", records=chunk.blobs,
                                         columns=_STAGE_BLOB_COLUMNS)


async def _restore(conn: Any, name: str) -> int:
    """Put an archived partition back: its rows at their original positions and
    transactions (the log reads as before it was archived), in one transaction."""
    async with conn.transaction():
        await conn.execute(_EVENTS["insert_staged_blobs"])
        try:
            with errors.refused():
                restored: int = await conn.fetchval(_ARCHIVAL["restore_partition"], name)
        except errors.PrivilegeRequired as exc:
            raise errors.ConfigurationError(
                f"restoring partition {name} is the owner's: run `props import` with the "
                f"owner's DSN (PROPS_DSN); nothing was written") from exc
    return restored


_STAGE_BLOB_COLUMNS = ["sha256", "size", "compression", "content"]
_STAGE_CHUNK = 1000
# ... or fewer: a chunk is held twice over (checked, and joined for the server) while the next
# is checked, and one line may be up to MAX_LINE_BYTES.
_STAGE_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass
class _Staged:
    """A checked chunk as the staging tables take it: events as one JSON array of their
    fields' arrays, beside their positions, transactions, times and lines; blobs as rows."""

    events: list[bytes]
    blobs: list[tuple[Any, ...]]
    positions: list[int] = dataclasses.field(default_factory=list)
    tx_ids: list[int | None] = dataclasses.field(default_factory=list)
    times: list[datetime] = dataclasses.field(default_factory=list)
    lines: list[int] = dataclasses.field(default_factory=list)  # each event's line
    first_line: int = 0
    last_line: int = 0


def _next_staged(state: _Verifier, lines: Iterator[tuple[int, bytes]]) -> _Staged:
    checked = _next_checked(state, lines, _STAGE_CHUNK, _STAGE_BYTES)
    chunk = _Staged([], [], first_line=checked[0][0] if checked else 0,
                    last_line=checked[-1][0] if checked else 0)
    for number, payload in checked:
        if isinstance(payload, tuple):  # an event
            fields, position, tx_id, recorded_at = payload
            chunk.events.append(fields)
            chunk.positions.append(position)
            chunk.tx_ids.append(tx_id)
            chunk.times.append(recorded_at)
            chunk.lines.append(number)
        else:
            chunk.blobs.append(blobs.packed(payload))
    return chunk

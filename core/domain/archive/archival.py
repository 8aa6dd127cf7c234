"""Archival: old partitions of the log leave the hot table as verified files.

`archive(before=POS)` takes the hot partitions that end at or before POS, in order. Each is
exported to its own file (the export format of props.core.domain.archive.exports), the file
is read back and verified, and only then, in one transaction, the partition is detached, its
row count checked against the file, marked archived and dropped. A failure at any step leaves the
partition in the table. Projections are not touched: analysts keep their rows.

A partition stays hot, and the archive says why, when it holds:
- events other than critic runs, grades and judge calls (definitions, snapshots, scorers,
  holds, ...): the live system reads those streams;
- events of a run under a retention hold (`retention.held`, until `retention.released`);
- events a consumer (projection runner, reactor, subscription) has not read yet: archiving
  would take them from under it; archival stops there.

`props import FILE` of an archive file restores its partition: the rows go back to their
original positions and transactions, so every reader sees the log as it was.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from props.core.domain import catalog
from props.core.domain.archive import exports
from props.core.log import errors
from props.core.log.store import EventStore
from props.schema import queries

_Q = queries.load("archival")


@dataclasses.dataclass(frozen=True)
class Done:
    partition: str
    from_position: int
    to_position: int
    events: int
    file: Path


@dataclasses.dataclass(frozen=True)
class Kept:
    partition: str
    from_position: int
    to_position: int
    why: str


@dataclasses.dataclass
class ArchivalReport:
    archived: list[Done] = dataclasses.field(default_factory=list)
    kept: list[Kept] = dataclasses.field(default_factory=list)
    stopped: str | None = None  # why archival stopped before `before`, if it did


async def held_runs(store: EventStore) -> dict[uuid.UUID, str]:
    """Runs under a retention hold, with the reason, as the retention streams say now (read
    directly: a hold just committed must keep its run whatever holds the fence back)."""
    held: dict[uuid.UUID, str] = {}
    for rec in await store.reader.read_category_now("retention"):
        if isinstance(rec.event, catalog.RetentionHeld):
            held[rec.event.run_id] = rec.event.reason
        elif isinstance(rec.event, catalog.RetentionReleased):
            held.pop(rec.event.run_id, None)
    return held


@dataclasses.dataclass(frozen=True)
class _Partition:
    name: str
    from_position: int
    to_position: int


@dataclasses.dataclass(frozen=True)
class _Contents:
    events: int
    kept_categories: list[str] | None
    runs: list[str] | None
    last_tx: int | None
    last_position: int | None


_HOT_PARTITIONS = queries.typed("archival", "hot_partitions", _Partition)
_PARTITION_CONTENTS = queries.typed("archival", "partition_contents", _Contents)


async def archive_before(store: EventStore, before: int, out_dir: Path,
                         progress: Callable[[str], None] | None = None) -> ArchivalReport:
    report = ArchivalReport()
    try:
        await anyio.Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise errors.PropsError(f"cannot write archives to {out_dir}: {exc}; nothing was "
                                f"archived") from exc
    held = {str(run): why for run, why in (await held_runs(store)).items()}
    for p in await store.sql.rows(_HOT_PARTITIONS, before):
        name, first, end = p.name, p.from_position, p.to_position
        contents = await store.sql.row(_PARTITION_CONTENTS, first, end)
        assert contents is not None  # an aggregate: one row
        if contents.kept_categories:
            report.kept.append(Kept(name, first, end, "holds events the live system reads ("
                                    + ", ".join(sorted(contents.kept_categories)) + ")"))
            continue
        holds = sorted(set(contents.runs or ()) & set(held))
        if holds:
            report.kept.append(Kept(name, first, end, f"run {holds[0]} is held: "
                                    f"{held[holds[0]]}" + (f" (and {len(holds) - 1} more)"
                                                            if len(holds) > 1 else "")))
            continue
        if contents.events:
            lagging = await store.sql.fetch(_Q["lagging_checkpoints"], contents.last_tx,
                                             contents.last_position)
            if lagging:
                report.stopped = (f"stopped at {name} (positions {first}-{end - 1}): consumer "
                                  f"{lagging[0]['name']} has not read it yet")
                break
            # The export reads through the visibility fence: a range it cannot see whole
            # would export short and be refused after the work; stop before, saying why.
            if await store.sql.fetchval(_Q["held_back_in_range"], first, end - 1):
                report.stopped = (f"stopped at {name} (positions {first}-{end - 1}): "
                                  f"{(await store.fence_status()).describe()}")
                break
        if progress:
            progress(name)
        report.archived.append(await _archive_one(store, name, first, end, out_dir))
    return report


async def _archive_one(store: EventStore, name: str, first: int, end: int,
                       out_dir: Path) -> Done:
    path = out_dir / f"{name}.jsonl.zst"
    try:
        exported = await exports.export(store, exports.Selection(after_position=first - 1,
                                                                 to_position=end - 1), path)
    except OSError as exc:  # a full disk, a folder gone: the partition stays
        raise errors.PropsError(f"cannot write {path}: {exc}; {name} stays in the table") \
            from exc
    verified = await anyio.to_thread.run_sync(exports.verify, path)  # read back, in full
    if verified.events != exported.events:
        raise errors.PropsError(f"{path} reads back {verified.events} events, "
                                f"{exported.events} were written: {name} stays in the table")
    async with store.sql.acquire() as conn, conn.transaction():
        # Waits for writers still inside the range (none should be: the consumers read past
        # it), but not for long: a busy table is retried later, not blocked.
        await conn.execute("SET LOCAL lock_timeout = '10s'")
        try:
            with errors.refused():
                await conn.execute(_Q["detach_partition"].format(partition=name))
        except errors.Busy as exc:
            raise errors.StoreUnavailable(f"{name} is busy (lock wait over 10 s): nothing "
                                          f"was archived from it; try again") from exc
        rows = await conn.fetchval(_Q["count_detached"].format(partition=name))
        if rows != exported.events:
            raise errors.PropsError(
                f"{name} holds {rows} events but {exported.events} were exported (a write "
                f"landed meanwhile): nothing was archived from it; run the archive again")
        marked = await conn.fetchval(_Q["mark_archived"], name, str(path.resolve()),
                                     verified.manifest["sha256"], rows)
        if marked is None:
            raise errors.PropsError(f"{name} was archived by someone else meanwhile")
        await conn.execute(_Q["drop_detached"].format(partition=name))
    return Done(name, first, end, exported.events, path)


async def partitions(store: EventStore) -> list[dict[str, Any]]:
    return [dict(r) for r in await store.sql.fetch(_Q["partitions"])]

"""Specimens into the log: each snapshot version as a `snapshot.synced` event.

Files go to the blob table by content hash; the ground truth travels in the event with its own
hash. Syncing what is already recorded appends nothing; a changed snapshot is a new version
beside the old one; a snapshot gone from the directory it was synced from is retired (an
event), never deleted.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimens
from props.core.log.events import NewEvent, RecordedEvent
from props.core.log.store import EventStore

# Event ids derive from what is synced, so two syncs racing append it once.
_NAMESPACE = uuid.UUID("5b0c6a52-3f7e-4c1e-9a51-7c2b3f6e8d10")


@dataclasses.dataclass
class SnapshotHistory:
    """What the log says about one snapshot."""

    slug: str
    stream_version: int = 0
    versions: list[catalog.SnapshotSynced] = dataclasses.field(default_factory=list)
    synced_at: list[datetime] = dataclasses.field(default_factory=list)
    retired: bool = False
    # Per version: brought by an import whose operator did not adopt its snapshots
    # (`props import --adopt-snapshots`). Such a version never grades, nor is given to, a
    # run of this database's own: an unsigned file cannot make itself the ground truth of
    # runs it did not bring, however it is dated.
    foreign: list[bool] = dataclasses.field(default_factory=list)

    @property
    def latest(self) -> catalog.SnapshotSynced:
        return self.versions[-1]

    def version(self, number: int) -> catalog.SnapshotSynced | None:
        return next((v for v in self.versions if v.version == number), None)

    def in_force_at(self, at: datetime, *, own: bool = True) -> catalog.SnapshotSynced | None:
        """The version current at `at` (the last one synced at or before it): what a run
        requested then is given, and graded against. For a run of this database's own
        (`own`), only versions that are not `foreign` count; an imported run is graded on
        every version, its file's too."""
        current = None
        for version, synced_at, foreign in zip(self.versions, self.synced_at, self.foreign,
                                               strict=True):
            if synced_at <= at and not (own and foreign):
                current = version
        return current

    def latest_for(self, *, own: bool = True) -> catalog.SnapshotSynced | None:
        """The latest version a run may be graded against (see `in_force_at`)."""
        usable = [v for v, foreign in zip(self.versions, self.foreign, strict=True)
                  if not (own and foreign)]
        return usable[-1] if usable else None


def foreign(rec: RecordedEvent) -> bool:
    """Whether an event came in by an import whose operator did not adopt its snapshots."""
    origin = rec.metadata.get("origin")
    return isinstance(origin, dict) and origin.get("ground_truth") != "adopted"


def _fold(known: dict[str, SnapshotHistory], records: Iterable[RecordedEvent]) -> None:
    for rec in records:
        event = rec.event
        if isinstance(event, catalog.SnapshotSynced):
            h = known.setdefault(event.slug, SnapshotHistory(event.slug))
            h.versions.append(event)
            h.synced_at.append(rec.recorded_at)
            h.foreign.append(foreign(rec))
            h.retired = False
        elif isinstance(event, catalog.SnapshotRetired):
            h = known.setdefault(event.slug, SnapshotHistory(event.slug))
            h.retired = True
        else:
            continue
        h.stream_version = rec.stream_version


async def history(store: EventStore) -> dict[str, SnapshotHistory]:
    """Every snapshot the log holds, with all its versions: its streams read whole, not
    through the fence, so what a sync just committed is there whatever else is running."""
    known: dict[str, SnapshotHistory] = {}
    ids = await store.reader.category_streams(streams.SNAPSHOT)
    found = await store.read_streams(ids) if ids else {}
    for stream_id in ids:
        _fold(known, found.get(stream_id, []))
    return known


async def history_of(store: EventStore, slug: str) -> SnapshotHistory | None:
    """One snapshot's history, read from its own stream."""
    known: dict[str, SnapshotHistory] = {}
    _fold(known, await store.read_stream(streams.snapshot(slug)))
    return known.get(slug)


@dataclasses.dataclass
class SyncReport:
    added: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)
    retired: list[str] = dataclasses.field(default_factory=list)

    @property
    def appended(self) -> int:
        return len(self.added) + len(self.updated) + len(self.retired)


async def sync(
    store: EventStore,
    source: str,
    found: list[specimens.Specimen],
    *,
    retire_missing: bool = True,
    progress: Callable[[str], None] = lambda _slug: None,
) -> SyncReport:
    """Record `found` (validated specimens from `source`) in the log."""
    known = await history(store)
    report = SyncReport()
    for specimen in found:
        progress(specimen.slug)
        past = known.get(specimen.slug)
        entries = specimen.file_entries
        gt_hash = specimens.ground_truth_hash(specimen.ground_truth)
        if past and past.versions and not past.retired and past.latest.files == entries \
                and past.latest.ground_truth_hash == gt_hash:
            report.unchanged.append(specimen.slug)
            continue
        for content in dict.fromkeys(specimen.files.values()):  # each distinct one once
            await store.put_blob(content)
        version = past.latest.version + 1 if past and past.versions else 1
        event = catalog.SnapshotSynced(
            slug=specimen.slug, version=version, files=entries,
            ground_truth=specimen.ground_truth, ground_truth_hash=gt_hash, source=source,
        )
        event_id = uuid.uuid5(_NAMESPACE, f"{specimen.slug}:{version}:{gt_hash}")
        await store.append(streams.snapshot(specimen.slug), [NewEvent(event, event_id)],
                           expected_version=past.stream_version if past else 0)
        (report.updated if past else report.added).append(specimen.slug)
    if retire_missing:
        present = {s.slug for s in found}
        for slug, past in sorted(known.items()):
            if slug in present or past.retired or not past.versions \
                    or past.latest.source != source:
                continue
            progress(slug)
            retired = catalog.SnapshotRetired(slug=slug, version=past.latest.version,
                                              reason=f"no longer in {source}")
            event_id = uuid.uuid5(_NAMESPACE, f"{slug}:{past.latest.version}:retired")
            await store.append(streams.snapshot(slug), [NewEvent(retired, event_id)],
                               expected_version=past.stream_version)
            report.retired.append(slug)
    return report

"""Ground truth as analysts need it, per snapshot version: files sets, TPs and their
occurrences, FPs, and the scope of each example (recall's denominator)."""

from __future__ import annotations

from typing import cast

import orjson

from props.core.domain import catalog
from props.core.log.events import RecordedEvent
from props.projections.base import Projection
from props.projections.tables import Column, Delta, Table

WHOLE_SNAPSHOT = ""  # files_hash of the example that is the whole snapshot

SNAPSHOTS = Table("snapshots", (
    Column("slug", "text", "key"), Column("version", "integer", "key"),
    Column("ground_truth_hash", "text"), Column("files", "integer"),
    Column("synced_at", "timestamptz"), Column("retired_at", "timestamptz"),
))
FILE_SETS = Table("file_sets", (
    Column("slug", "text", "key"), Column("version", "integer", "key"),
    Column("files_hash", "text", "key"), Column("name", "text"), Column("files", "text[]"),
))
TRUE_POSITIVES = Table("true_positives", (
    Column("slug", "text", "key"), Column("version", "integer", "key"),
    Column("tp_id", "text", "key"), Column("severity", "text"), Column("rationale", "text"),
    Column("occurrences", "integer"),
))
OCCURRENCES = Table("tp_occurrences", (
    Column("slug", "text", "key"), Column("version", "integer", "key"),
    Column("tp_id", "text", "key"), Column("occurrence", "integer", "key"),
    Column("files", "text[]"), Column("locations", "jsonb"),
))
FALSE_POSITIVES = Table("false_positives", (
    Column("slug", "text", "key"), Column("version", "integer", "key"),
    Column("fp_id", "text", "key"), Column("rationale", "text"),
    Column("relevant_files", "text[]"), Column("locations", "jsonb"),
))
SCOPES = Table("scopes", (
    Column("slug", "text", "key"), Column("version", "integer", "key"),
    Column("files_hash", "text", "key"), Column("tp_id", "text", "key"),
    Column("occurrence", "integer", "key"),
))


def _locations(occ: catalog.Occurrence) -> str:
    return orjson.dumps([loc.model_dump(mode="json") for loc in occ.locations]).decode()


def synced(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.SnapshotSynced, rec.event)
    key = {"slug": e.slug, "version": e.version}
    delta.put("snapshots", **key, ground_truth_hash=e.ground_truth_hash, files=len(e.files),
              synced_at=rec.recorded_at)
    gt = e.ground_truth
    for fs in gt.file_sets:
        delta.put("file_sets", **key, files_hash=fs.files_hash, name=fs.name, files=fs.files)
    for tp in gt.true_positives:
        delta.put("true_positives", **key, tp_id=tp.id, severity=tp.severity,
                  rationale=tp.rationale, occurrences=len(tp.occurrences))
        for n, occ in enumerate(tp.occurrences, start=1):
            delta.put("tp_occurrences", **key, tp_id=tp.id, occurrence=n,
                      files=sorted(occ.files), locations=_locations(occ))
    for fp in gt.false_positives:
        delta.put("false_positives", **key, fp_id=fp.id, rationale=fp.rationale,
                  relevant_files=fp.relevant_files,
                  locations=orjson.dumps([[loc.model_dump(mode="json") for loc in o.locations]
                                          for o in fp.occurrences]).decode())
    for scope in gt.scopes:
        for occ_id in scope.occurrences:
            tp_id, _, number = occ_id.rpartition("#")
            delta.put("scopes", **key, files_hash=scope.files_hash or WHOLE_SNAPSHOT,
                      tp_id=tp_id, occurrence=int(number))


def retired(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.SnapshotRetired, rec.event)
    delta.put("snapshots", slug=e.slug, version=e.version, retired_at=rec.recorded_at)


GROUND_TRUTH = Projection(
    name="ground_truth",
    version=2,  # 2: text keys compare by code point
    tables=(SNAPSHOTS, FILE_SETS, TRUE_POSITIVES, OCCURRENCES, FALSE_POSITIVES, SCOPES),
    folds={"snapshot.synced": synced, "snapshot.retired": retired},
)

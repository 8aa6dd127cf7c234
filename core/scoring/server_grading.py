"""Grading on the server: a scorer whose rule is also written in SQL grades many runs in one
statement, and their grades are appended by the same statement.

Re-scoring history is the log's reason to exist, and its bulk is a rule applied to every
recorded issue. In Python each issue crosses the wire, is parsed, matched and turned into an
event that crosses back; on the server none of that happens: the rule reads the projected
issues and writes one `grades.emitted` event per run straight into the log (the log's own
trigger keeps every guarantee: ids once, streams dense). The scorer's Python rule stays the
reference (the grader reactor grades one run at a time with it, and a test proves both
agree), and the SQL is part of the scorer's code hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from props.core.domain import catalog
from props.core.log import bulk, errors, retries
from props.core.log.database import BULK_SETTINGS
from props.core.log.store import EventStore
from props.core.scoring import scorers
from props.schema import queries

# The scorer's common table expressions, spliced into each statement (both are ours).
_STATEMENTS = {name: sql.replace("{scoring}", queries.load("overlap")["scoring"])
               for name, sql in queries.load("server_grading").items()}
_GRADES_ID_PREFIX = "props-grades"  # keep in step with server_grading.sql (append_grades)
ROOM_PER_RUN = 1000  # log positions to make room for per run graded, when partitions run out


def grades_on_server(s: scorers.Scorer) -> bool:
    """Whether `s` was registered with a rule in SQL (scorers.register's `sql_tolerance`)."""
    return scorers.sql_tolerance(s) is not None


def run_grades_id(run_id: uuid.UUID, scorer_ref: str, ground_truth_hash: str) -> uuid.UUID:
    """The id of a run's `grades.emitted` as the server derives it (`append_grades`): a
    version 8 (custom) UUID from sha256, which the server has built in (sha1 it has not)."""
    name = f"{_GRADES_ID_PREFIX}:{run_id}:{scorer_ref}:{ground_truth_hash}"
    return bulk.uuid_from_hash(hashlib.sha256(name.encode()).digest(), 8)


@dataclasses.dataclass
class Graded:
    """What one statement did to a chunk of runs."""

    malformed: dict[uuid.UUID, str]  # run -> why it cannot be graded (nothing graded)
    grades: int = 0  # issues graded
    appended: int = 0  # grades new to the log
    # What the chance levels need: each graded run's issues, and their ranges in files that
    # hold a TP occurrence, by file (none in a dry run).
    issues: dict[uuid.UUID, int] = dataclasses.field(default_factory=dict)
    ranges: dict[uuid.UUID, dict[str, list[tuple[int, int]]]] = dataclasses.field(
        default_factory=dict)


INT32 = 2**31 - 1  # PostgreSQL's integer, the statements' line numbers


def _truth(snapshots: Sequence[catalog.SnapshotSynced], tolerance: int) -> tuple[str, str]:
    """The ground truth's line ranges and the snapshots' files, as the statements take them.

    The statement widens each range by `tolerance` in PostgreSQL's integer: an end within
    `tolerance` of 2^31-1 (an imported key's line 2^31-1) would overflow it and stop the
    grading of every run. Such an end is given as 2^31-1 - tolerance: widened, it reaches
    2^31-1, past every line an issue can name, so every score is what it was."""
    last = INT32 - tolerance
    ranges: list[list[Any]] = []
    files: list[list[Any]] = []
    for snap in {(s.slug, s.version): s for s in snapshots}.values():
        gt = snap.ground_truth
        for kind, defects in (("tp", gt.true_positives), ("fp", gt.false_positives)):
            for d in defects:
                for n, occ in enumerate(d.occurrences, start=1):
                    ranges += [[snap.slug, snap.version, kind, d.id, n, loc.file, r.start,
                                min(r.end, last)]
                               for loc in occ.locations for r in loc.ranges]
        files += [[snap.slug, snap.version, f.path] for f in snap.files]
    return orjson.dumps(ranges).decode(), orjson.dumps(files).decode()


async def grade(store: EventStore, s: scorers.Scorer,
                runs: Sequence[tuple[uuid.UUID, catalog.SnapshotSynced]], *,
                dry_run: bool) -> Graded:
    """Grade `runs` (each with the snapshot version it is graded against) under `s` in one
    transaction; append the grades unless `dry_run`."""
    tolerance = scorers.sql_tolerance(s)
    assert tolerance is not None, "grade only what grades_on_server accepts"
    ranges, files = _truth([snap for _, snap in runs], tolerance)
    try:
        return await _grade_all(store, s, tolerance, runs, ranges, files, dry_run)
    except Exception as exc:  # (raised by store.sql as OutOfRange; as itself elsewhere)
        if not isinstance(errors.translate(exc, errors.REFUSALS), errors.OutOfRange):
            raise
    # A line range the scorer's SQL cannot hold (stored before the catalog bounded line
    # numbers): those runs are told apart, the others graded. Looked for only now: it costs
    # a scan of the chunk's issues that no chunk of bounded issues needs.
    out_of_range = {row["run_id"]: f"malformed issue: {row['issue_id']}: a line range "
                                   f"outside 1..2^31-1"
                    for row in await store.sql.fetch(_STATEMENTS["out_of_range"],
                                                     [run for run, _ in runs])}
    rest = [(run, snap) for run, snap in runs if run not in out_of_range]
    graded = (await _grade_all(store, s, tolerance, rest,
                               *_truth([snap for _, snap in rest], tolerance), dry_run)
              if rest else Graded({}))
    graded.malformed.update(out_of_range)
    return graded


async def _grade_all(store: EventStore, s: scorers.Scorer, tolerance: int,
                     runs: Sequence[tuple[uuid.UUID, catalog.SnapshotSynced]],
                     ranges: str, files: str, dry_run: bool) -> Graded:
    # The statement is all or nothing: after a race with a concurrent writer of the same
    # grades or grading stream, the next attempt skips what that writer stored.
    return await retries.appending(
        lambda: _grade_once(store, s, tolerance, runs, ranges, files, dry_run),
        lambda: store.ensure_partitions(ROOM_PER_RUN * len(runs)))


async def _grade_once(store: EventStore, s: scorers.Scorer, tolerance: int,
                      runs: Sequence[tuple[uuid.UUID, catalog.SnapshotSynced]],
                      ranges: str, files: str, dry_run: bool) -> Graded:
    args = ([run for run, _ in runs], [snap.slug for _, snap in runs],
            [snap.version for _, snap in runs], [snap.ground_truth_hash for _, snap in runs],
            ranges, tolerance, files)
    async with store.sql.acquire() as conn, conn.transaction():
        await conn.execute(BULK_SETTINGS if dry_run else
                           f"{BULK_SETTINGS}; {_STATEMENTS['lz4_where_available']}")
        if dry_run:
            row = await conn.fetchrow(_STATEMENTS["count_matches"], *args)
        else:
            row = await conn.fetchrow(_STATEMENTS["append_grades"], *args, scorers.ref(s),
                                      s.name, s.version, s.code_hash,
                                      catalog.GradesEmitted.schema_version)
    assert row is not None
    malformed = {uuid.UUID(run): f"malformed issue: {issue}: {problem}"
                 for run, issue, problem in orjson.loads(row["problems"] or "[]")}
    graded = Graded(malformed, row["graded"], row["appended"])
    if not dry_run:
        graded.issues = dict(zip(row["counted_runs"] or [], row["counted_issues"] or [],
                                 strict=True))
        for run, file, start, end in zip(row["chance_runs"] or [], row["chance_files"] or [],
                                         row["chance_starts"] or [], row["chance_ends"] or [],
                                         strict=True):
            graded.ranges.setdefault(run, {}).setdefault(file, []).append((start, end))
    return graded

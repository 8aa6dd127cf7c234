"""The chance level of each run a location rule grades, as a `grades.chance` event in the
rule's grading stream (`props.core.scoring.chance` computes it).

Runs graded in Python (the grader reactor, re-scoring with tiered, baselines' runs) give
their candidate issues; runs graded on the server give what the grading statement returns
with the grades (their ranges in files that hold a TP occurrence, parsed there anyway). The
files' line counts come from the snapshot's blobs, once per file content and process. A
file whose content is not stored leaves the run without a chance level (never a guessed
one): the report counts such runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence

from props.core.domain import catalog, streams
from props.core.log.events import Event, NewEvent
from props.core.log.store import EventStore
from props.core.scoring import chance, scorers, server_grading

_LINES: dict[str, int] = {}  # file content (sha256) -> lines
_MAX_CACHED = 200_000
Write = tuple[str, list[Event | NewEvent]]


class Clock:
    """Seconds spent on chance levels (the re-scoring report and its bench show them)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.runs = 0

    def __enter__(self) -> Clock:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds += time.perf_counter() - self._t0


def line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


async def line_counts(store: EventStore, snapshot: catalog.SnapshotSynced,
                      files: set[str]) -> dict[str, int] | None:
    """The line counts of `files` of the snapshot, or None if a file's content is missing."""
    shas = {f.path: f.sha256 for f in snapshot.files}
    wanted = sorted({shas[p] for p in files if p in shas and shas[p] not in _LINES})
    if wanted:
        if len(_LINES) > _MAX_CACHED:
            _LINES.clear()
        for sha, data in (await store.get_blobs(wanted)).items():
            _LINES[sha] = line_count(data)
    out: dict[str, int] = {}
    for path in files:
        known = _LINES.get(shas.get(path, ""))
        if known is None:
            return None
        out[path] = known
    return out


async def _write(store: EventStore, s: scorers.Scorer, g: chance.Geometry, run_id: uuid.UUID,
                 snapshot: catalog.SnapshotSynced, ranges: Mapping[str, chance.Ranges],
                 count: int) -> Write | None:
    t = chance.truth(snapshot.ground_truth, snapshot.ground_truth_hash)
    lines = await line_counts(store, snapshot, chance.needed(t, ranges))
    if lines is None:
        return None
    e = chance.event(s, g, run_id, snapshot, ranges, count, lines)
    return streams.grading(run_id, scorers.ref(s)), [NewEvent(e, chance.event_id(e))]


async def of_run(store: EventStore, s: scorers.Scorer, run_id: uuid.UUID,
                 snapshot: catalog.SnapshotSynced,
                 issues: Mapping[str, list[catalog.Location]], clock: Clock) -> Write | None:
    """The chance event of one run's candidate `issues` under the rule `s` (None: `s` is no
    location rule, or a file's content is missing)."""
    g = chance.geometry(s)
    if g is None:
        return None
    with clock:
        clock.runs += 1
        return await _write(store, s, g, run_id, snapshot,
                            chance.issue_ranges(issues.values()), len(issues))


async def of_server_runs(store: EventStore, s: scorers.Scorer,
                         runs: Sequence[tuple[uuid.UUID, catalog.SnapshotSynced]],
                         graded: server_grading.Graded, clock: Clock) -> list[Write]:
    """The chance events of runs the server graded (every issue a candidate), from the
    issue counts and ranges its statement returned."""
    g = chance.geometry(s)
    if g is None:
        return []
    with clock:
        out: list[Write] = []
        for run, snapshot in runs:
            if (count := graded.issues.get(run)) is None:
                continue  # not graded (malformed), or no issue
            write = await _write(store, s, g, run, snapshot, graded.ranges.get(run, {}), count)
            if write is not None:
                out.append(write)
        clock.runs += len(out)
        return out

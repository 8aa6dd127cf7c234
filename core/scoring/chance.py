"""Chance level: what a location rule would grade the same issues if they pointed anywhere.

A critic that reports an issue on every line of a file finds every defect in it, and its
recall says 100%. Recall means something only beside what the same issues would score by
chance. The null model (`NULL_MODEL`, docs/reference/chance.md) keeps every issue's file and
span, and moves the run's issues *in each file together* by one offset drawn uniformly over
the file's lines, the lines taken as a circle (a range that runs past the last line goes on
at the first). Each issue alone lies uniformly anywhere in its file; together they keep
their spacing, so a critic that covers every line still covers every line (chance 100%) and
one precise find keeps nearly all of its recall. Files move independently.

Computed exactly, not sampled: for one TP occurrence and one file, the offsets at which some
issue range meets the occurrence (widened by the rule's slack) form a union of intervals of
offsets, counted in one sweep; across files the misses multiply. The rule's own tiers give
the slacks (`Geometry`): full credit, near (tiered), same file (tiered). What the null does
not model: the rule's one-to-one assignment and its decoys, which can only take finds away;
so the chance level is an upper bound of the null's expected recall, and recall above chance
a lower bound (it never flatters a critic).
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping

import orjson

from props.core.domain import catalog
from props.core.scoring import scorers
from props.core.scoring.released import tiered_1, tiered_2

NULL_MODEL = "rotation@1"
_NAMESPACE = uuid.UUID("5d1b0c2e-6f0a-4c1e-9a53-0c8a3f6e2b71")
Ranges = list[tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What a rule grades by where an issue lies: a find when an issue's range meets an
    occurrence's widened by `find` lines; partial credit `near_grade` within `near` lines;
    `same_file` credit for any issue in one of the occurrence's files (None: none)."""

    find: int
    near: int | None = None
    near_grade: float = 0.0
    same_file: float | None = None


def geometry(s: scorers.Scorer) -> Geometry | None:
    """The rule's geometry, or None for a scorer that reads claims (a judge, a person):
    their grades do not follow from where an issue lies, and have no chance level here."""
    if isinstance(s, scorers.OverlapScorer):
        return Geometry(find=s.tolerance)
    if isinstance(s, tiered_1.TieredScorer):
        g = tiered_1.GRADES
        return Geometry(0, s.near, g[tiered_1.NEAR], g[tiered_1.SAME_FILE])
    if isinstance(s, tiered_2.StrictTieredScorer):
        g = tiered_2.GRADES
        return Geometry(0, s.near, g[tiered_2.NEAR], g[tiered_2.SAME_FILE])
    return None


def covered(lines: int, issues: Ranges, occurrence: Ranges, slack: int) -> int:
    """How many of the file's `lines` offsets put some range of `issues` (moved together)
    on some range of `occurrence` widened by `slack`: an exact count, in one sweep."""
    spans: Ranges = []
    for a, b in occurrence:
        for s, e in issues:
            lo, length = a - slack - e, (b + slack - s) - (a - slack - e) + 1
            if length >= lines:
                return lines
            lo %= lines
            if lo + length <= lines:
                spans.append((lo, lo + length - 1))
            else:  # round the circle
                spans += [(lo, lines - 1), (0, lo + length - 1 - lines)]
    total, reach = 0, -1
    for lo, hi in sorted(spans):
        if hi > reach:
            total += hi - max(lo, reach + 1) + 1
            reach = hi
    return total


def _by_file(locations: Iterable[catalog.Location]) -> dict[str, Ranges]:
    out: dict[str, Ranges] = defaultdict(list)
    for loc in locations:
        out[loc.file] += [(r.start, r.end) for r in loc.ranges]
    return out


def occurrence_chances(g: Geometry, issues: Mapping[str, Ranges], gt: catalog.GroundTruth,
                       lines: Mapping[str, int]) -> list[catalog.OccurrenceChance]:
    """Each TP occurrence's chance (those the issues can reach at all): `issues` are the
    run's issue ranges by file, `lines` the files' line counts."""
    out: list[catalog.OccurrenceChance] = []
    for tp in gt.true_positives:
        for n, occ in enumerate(tp.occurrences, start=1):
            miss_find = miss_near = miss_file = 1.0
            for file, theirs in _by_file(occ.locations).items():
                mine, size = issues.get(file), lines.get(file, 0)
                if not mine or size <= 0:
                    continue
                miss_find *= 1 - covered(size, mine, theirs, g.find) / size
                if g.near is not None:
                    miss_near *= 1 - covered(size, mine, theirs, g.near) / size
                miss_file = 0.0
            found = 1 - miss_find
            if g.near is None:
                graded = found
            else:
                near = max(found, 1 - miss_near)
                same = max(near, 1 - miss_file) if g.same_file is not None else near
                graded = found + g.near_grade * (near - found) + (g.same_file or 0) * (
                    same - near)
            if found > 0 or graded > 0:
                out.append(catalog.OccurrenceChance(
                    tp_id=tp.id, tp_occurrence=n, found=round(min(found, 1.0), 9),
                    graded=round(min(graded, 1.0), 9)))
    return out


def issue_ranges(issues: Iterable[list[catalog.Location]]) -> dict[str, Ranges]:
    """The ranges of the issues (each a list of locations), by file."""
    out: dict[str, Ranges] = defaultdict(list)
    for locations in issues:
        for file, ranges in _by_file(locations).items():
            out[file] += ranges
    return out


def needed(gt: catalog.GroundTruth, files: Iterable[str]) -> set[str]:
    """The files among `files` (where issues lie) that hold some TP occurrence: the only
    ones whose line counts the chance needs."""
    wanted = set(files)
    return {loc.file for tp in gt.true_positives for occ in tp.occurrences
            for loc in occ.locations if loc.file in wanted}


def event(s: scorers.Scorer, g: Geometry, run_id: uuid.UUID,
          snapshot: catalog.SnapshotSynced, issues: Mapping[str, Ranges], count: int,
          lines: Mapping[str, int]) -> catalog.GradesChance:
    return catalog.GradesChance(
        critique_run_id=run_id, scorer=scorers.scorer_ref(s, snapshot.ground_truth_hash),
        null_model=NULL_MODEL, issues=count,
        occurrences=occurrence_chances(g, issues, snapshot.ground_truth, lines))


def event_id(e: catalog.GradesChance) -> uuid.UUID:
    """Derived from the run, scorer, ground truth, null model and the chances themselves: a
    rerun appends nothing, and a run whose candidates changed (so its chance did) appends
    its new chance once, which replaces the old in the projection."""
    s = e.scorer
    body = orjson.dumps([o.model_dump() for o in e.occurrences])
    name = (f"{e.critique_run_id}:chance:{s.name}@{s.version}:{s.ground_truth_hash}:"
            f"{e.null_model}:{e.issues}:{hashlib.sha256(body).hexdigest()}")
    return uuid.uuid5(_NAMESPACE, name)

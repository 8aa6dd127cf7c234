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


def merged(lines: int, issues: Ranges) -> Ranges:
    """`issues` on the circle of `lines` lines, overlapping and adjacent ranges merged: the
    same offsets meet an occurrence (a range meets it when one of its parts does), and the
    sweep below runs over fewer of them. A range as long as the file covers it all."""
    if not issues:
        return []
    if max([e - s for s, e in issues]) + 1 >= lines:
        return [(0, lines - 1)]
    # (start on the circle, length - 1): the loop below is a re-scoring's hottest Python
    spans = iter(sorted([(s % lines, e - s) for s, e in issues]))
    out: Ranges = []
    first, d = next(spans)
    last = first + d
    for s, d in spans:
        if s <= last + 1:
            if s + d > last:
                last = s + d
        else:
            out.append((first, last))
            first, last = s, s + d
    out.append((first, last))
    return out


def covered(lines: int, issues: Ranges, occurrence: Ranges, slack: int) -> int:
    """How many of the file's `lines` offsets put some range of `issues` (moved together)
    on some range of `occurrence` widened by `slack`: an exact count, in one sweep."""
    spans: Ranges = []
    add = spans.append
    for a, b in occurrence:
        a, b = a - slack, b + slack
        for s, e in issues:
            # the offsets from a - e to b - s put (s, e) on (a, b)
            length = b - s - a + e + 1
            if length >= lines:
                return lines
            lo = (a - e) % lines
            if lo + length <= lines:
                add((lo, lo + length - 1))
            else:  # round the circle
                add((lo, lines - 1))
                add((0, lo + length - 1 - lines))
    spans.sort()
    total, reach = 0, -1
    for lo, hi in spans:
        if hi > reach:
            total += hi - (lo if lo > reach else reach + 1) + 1
            reach = hi
    return total


def _by_file(locations: Iterable[catalog.Location]) -> dict[str, Ranges]:
    out: dict[str, Ranges] = defaultdict(list)
    for loc in locations:
        out[loc.file] += [(r.start, r.end) for r in loc.ranges]
    return out


@dataclasses.dataclass(frozen=True)
class Truth:
    """A ground truth's TP occurrences as the chance reads them: (id, number, ranges by
    file), and the files they lie in. Made once per ground truth (`truth`)."""

    occurrences: list[tuple[str, int, dict[str, Ranges]]]
    files: frozenset[str]


_TRUTHS: dict[str, Truth] = {}


def truth(gt: catalog.GroundTruth, ground_truth_hash: str) -> Truth:
    found = _TRUTHS.get(ground_truth_hash)
    if found is None:
        if len(_TRUTHS) > 1000:
            _TRUTHS.clear()
        occurrences = [(tp.id, n, dict(_by_file(occ.locations)))
                       for tp in gt.true_positives for n, occ in enumerate(tp.occurrences, 1)]
        found = _TRUTHS[ground_truth_hash] = Truth(
            occurrences, frozenset(f for _, _, by in occurrences for f in by))
    return found


def _one(g: Geometry, by_file: dict[str, Ranges], placed: Mapping[str, Ranges],
         lines: Mapping[str, int]) -> tuple[float, float]:
    """One occurrence's chance of a find, and its expected best grade: per file the offsets
    that reach it, the misses multiplied across its files."""
    miss_find = miss_near = miss_file = 1.0
    for file, theirs in by_file.items():
        mine = placed.get(file)
        if not mine:
            continue
        size = lines[file]
        miss_find *= 1 - covered(size, mine, theirs, g.find) / size
        if g.near is not None:
            miss_near *= 1 - covered(size, mine, theirs, g.near) / size
        miss_file = 0.0
    found = 1 - miss_find
    if g.near is None:
        return found, found
    near = max(found, 1 - miss_near)
    same = max(near, 1 - miss_file) if g.same_file is not None else near
    return found, found + g.near_grade * (near - found) + (g.same_file or 0) * (same - near)


def occurrence_chances(g: Geometry, issues: Mapping[str, Ranges], t: Truth,
                       lines: Mapping[str, int]) -> list[catalog.OccurrenceChance]:
    """Each TP occurrence's chance (those the issues can reach at all): `issues` are the
    run's issue ranges by file, `lines` the files' line counts."""
    out: list[catalog.OccurrenceChance] = []
    placed = {f: merged(lines[f], ranges) for f, ranges in issues.items()
              if ranges and lines.get(f, 0) > 0}
    for tp_id, n, by_file in t.occurrences:
        if placed.keys().isdisjoint(by_file):
            continue
        found, graded = _one(g, by_file, placed, lines)
        if found > 0 or graded > 0:
            out.append(catalog.OccurrenceChance(
                tp_id=tp_id, tp_occurrence=n, found=round(min(found, 1.0), 9),
                graded=round(min(graded, 1.0), 9)))
    return out


def issue_ranges(issues: Iterable[list[catalog.Location]]) -> dict[str, Ranges]:
    """The ranges of the issues (each a list of locations), by file."""
    out: dict[str, Ranges] = defaultdict(list)
    for locations in issues:
        for file, ranges in _by_file(locations).items():
            out[file] += ranges
    return out


def needed(t: Truth, files: Iterable[str]) -> set[str]:
    """The files among `files` (where issues lie) that hold some TP occurrence: the only
    ones whose line counts the chance needs."""
    return set(t.files.intersection(files))


def event(s: scorers.Scorer, g: Geometry, run_id: uuid.UUID,
          snapshot: catalog.SnapshotSynced, issues: Mapping[str, Ranges], count: int,
          lines: Mapping[str, int]) -> catalog.GradesChance:
    return catalog.GradesChance(
        critique_run_id=run_id, scorer=scorers.scorer_ref(s, snapshot.ground_truth_hash),
        null_model=NULL_MODEL, issues=count,
        occurrences=occurrence_chances(
            g, issues, truth(snapshot.ground_truth, snapshot.ground_truth_hash), lines))


def event_id(e: catalog.GradesChance) -> uuid.UUID:
    """Derived from the run, scorer, ground truth, null model and the chances themselves: a
    rerun appends nothing, and a run whose candidates changed (so its chance did) appends
    its new chance once, which replaces the old in the projection."""
    s = e.scorer
    body = orjson.dumps([o.model_dump() for o in e.occurrences])
    name = (f"{e.critique_run_id}:chance:{s.name}@{s.version}:{s.ground_truth_hash}:"
            f"{e.null_model}:{e.issues}:{hashlib.sha256(body).hexdigest()}")
    return uuid.uuid5(_NAMESPACE, name)

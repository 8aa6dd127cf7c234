"""tiered@2: tiered@1's tiers and assignment, decoys matched by overlap only.

FROZEN: this file is a released scorer. Every grade it made cites its code hash, and
tests/test_scoring.py holds the file's bytes to their digest: a change of rule (or of a word)
is a new version in a new file, never an edit here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from typing import Any

import orjson

from props.core.domain import catalog
from props.core.scoring.matches import Match


def _overlap(a: catalog.LineRange, b: catalog.LineRange, slack: int) -> int:
    """Lines two ranges share, with `b` widened by `slack` lines on both sides."""
    return max(0, min(a.end, b.end + slack) - max(a.start, b.start - slack) + 1)


Tier = tuple[int, int, int]  # (tier, lines shared, -distance): larger is better
OVERLAP, NEAR, SAME_FILE = 3, 2, 1


def _tier(issue: list[catalog.Location], occurrence: catalog.Occurrence, near: int) -> Tier:
    """How close an issue lies to an occurrence: overlapping lines in the same file (by how
    many), else within `near` lines (by how few between), else only the same file."""
    best: Tier = (0, 0, 0)
    for mine in issue:
        for theirs in occurrence.locations:
            if mine.file != theirs.file:
                continue
            best = max(best, (SAME_FILE, 0, -(10**9)))
            for a in mine.ranges:
                for b in theirs.ranges:
                    shared = _overlap(a, b, 0)
                    gap = max(b.start - a.end, a.start - b.end)
                    tier = (OVERLAP, shared, 0) if shared else \
                        (NEAR if gap <= near else SAME_FILE, 0, -gap)
                    best = max(best, tier)
    return best


GRADES = {OVERLAP: 1.0, NEAR: 0.6, SAME_FILE: 0.3}


@dataclasses.dataclass(frozen=True)
class StrictTieredScorer:
    """tiered@2: tiered@1's tiers and one-to-one assignment, except that a decoy (a known
    FP) is matched only by an issue that overlaps one of its occurrences. tiered@1 matched
    decoys by proximity too, so an issue about something else in a decoy's file counted as a
    known false positive. (The assignment is written again here, not shared with tiered@1:
    tiered@1's code is frozen, its code hash in every grade it made.)"""

    version: int
    near: int = 5
    name: str = "tiered"
    deterministic: bool = True

    @property
    def settings(self) -> dict[str, Any]:
        return {"near": self.near, "decoys": "overlap only",
                "grades": {"overlap": GRADES[OVERLAP], "near": GRADES[NEAR],
                           "same_file": GRADES[SAME_FILE]}}

    @functools.cached_property
    def code_hash(self) -> str:
        source = "".join(inspect.getsource(x) for x in (type(self), _tier, _overlap))
        settings = orjson.dumps(self.settings, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(source.encode() + b"\0" + settings).hexdigest()

    def match_run(self, issues: dict[str, list[catalog.Location]],
                  gt: catalog.GroundTruth) -> dict[str, Match]:
        candidates: list[tuple[int, int, int, int, str, str, int]] = []
        for issue_id, locs in issues.items():
            for kind, defects in ((0, gt.true_positives), (1, gt.false_positives)):
                for d in defects:
                    for n, occ in enumerate(d.occurrences, start=1):
                        tier, shared, closeness = _tier(locs, occ, self.near)
                        if tier == OVERLAP or (tier and kind == 0):  # decoys: overlap only
                            candidates.append((-tier, -shared, -closeness, kind, issue_id,
                                               d.id, n))
        candidates.sort()
        out: dict[str, Match] = {}
        taken: set[tuple[int, str, int]] = set()
        for neg_tier, _shared, _closeness, kind, issue_id, defect, n in candidates:
            if issue_id in out or (kind, defect, n) in taken:
                continue
            taken.add((kind, defect, n))
            out[issue_id] = Match(tp_id=defect, tp_occurrence=n, grade=GRADES[-neg_tier]) \
                if kind == 0 else Match(fp_id=defect)
        return {issue_id: out.get(issue_id, Match()) for issue_id in issues}


V2 = StrictTieredScorer(version=2, near=5)

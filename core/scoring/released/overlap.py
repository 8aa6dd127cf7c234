"""overlap@1 and overlap@2: an issue matches the occurrence its lines overlap most (overlap@2
widens each occurrence by 3 lines). One rule, two settings: the code hash covers both the
rule, written twice (here, and in SQL for re-scoring on the server), and the settings.

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
from props.schema import queries


def _overlap(a: catalog.LineRange, b: catalog.LineRange, slack: int) -> int:
    """Lines two ranges share, with `b` widened by `slack` lines on both sides."""
    return max(0, min(a.end, b.end + slack) - max(a.start, b.start - slack) + 1)


def _score(issue: list[catalog.Location], occurrence: catalog.Occurrence, slack: int) -> int:
    total = 0
    for mine in issue:
        for theirs in occurrence.locations:
            if mine.file == theirs.file:
                total += sum(_overlap(a, b, slack) for a in mine.ranges for b in theirs.ranges)
    return total


@dataclasses.dataclass(frozen=True)
class OverlapScorer:
    """An issue matches the TP occurrence (else the FP) its line ranges overlap most, each
    occurrence widened by `tolerance` lines; ties go to the smallest id."""

    version: int
    tolerance: int = 0
    name: str = "overlap"
    deterministic: bool = True

    @property
    def settings(self) -> dict[str, Any]:
        return {"tolerance": self.tolerance}

    @functools.cached_property
    def code_hash(self) -> str:
        # The rule twice: in Python (one run at a time) and in SQL (re-scoring on the server).
        source = inspect.getsource(type(self)) + inspect.getsource(_score) + \
            inspect.getsource(_overlap) + "".join(queries.load("overlap").values())
        settings = orjson.dumps(self.settings, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(source.encode() + b"\0" + settings).hexdigest()

    def match_run(self, issues: dict[str, list[catalog.Location]],
                  gt: catalog.GroundTruth) -> dict[str, Match]:
        return {issue_id: self.match(locs, gt) for issue_id, locs in issues.items()}

    def match(self, locations: list[catalog.Location], gt: catalog.GroundTruth) -> Match:
        best: tuple[int, str, int] | None = None
        for tp in gt.true_positives:
            for n, occ in enumerate(tp.occurrences, start=1):
                score = _score(locations, occ, self.tolerance)
                if score and (best is None or (-score, tp.id, n) < (-best[0], best[1], best[2])):
                    best = (score, tp.id, n)
        if best is not None:
            return Match(tp_id=best[1], tp_occurrence=best[2], grade=1.0)
        decoy: tuple[int, str] | None = None
        for fp in gt.false_positives:
            score = sum(_score(locations, occ, self.tolerance) for occ in fp.occurrences)
            if score and (decoy is None or (-score, fp.id) < (-decoy[0], decoy[1])):
                decoy = (score, fp.id)
        if decoy is not None:
            return Match(fp_id=decoy[1])
        return Match()


V1 = OverlapScorer(version=1, tolerance=0)
V2 = OverlapScorer(version=2, tolerance=3)

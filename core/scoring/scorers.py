"""Scorers: versioned, deterministic functions from (reported issue, ground truth) to a match.

A scorer is named and versioned (`overlap@2`). Its code hash covers its source and its
settings, so a grade says exactly what produced it; the ground-truth hash says what it was
computed against. Grading the same issues against the same ground truth with the same scorer
gives byte-identical grades. A released version's code is therefore frozen: a new rule is a
new version (a new class, when the rule's code changes), never an edit of the old one.

What counts as found: a TP match whose grade is full credit (FIND_GRADE) is a find; one with a
lower grade (tiered's near or same-file) is partial credit, reported apart as graded recall
and never as recall. The rule lives here and in the `run_scores` view, which reads it from
the stored grades.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
from typing import Any, Protocol, runtime_checkable

import orjson

from props.core.domain import catalog, streams
from props.core.log import errors

# What a match is, and what counts as a find, named where every scorer (the judges too)
# reads them: matches (they were here, and the judges imported this module for them).
from props.core.scoring.matches import FIND_GRADE as FIND_GRADE
from props.core.scoring.matches import Match as Match
from props.schema import queries


class Scorer(Protocol):
    """What every scorer is: a name and version, and what its grades are bound to (code hash,
    settings). How it is asked about a run is `verdicts.of(scorer)`: a location rule answers
    itself (`LocationRule`), a judge asks a model."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def deterministic(self) -> bool: ...

    @property
    def settings(self) -> dict[str, Any]: ...

    @property
    def code_hash(self) -> str: ...


@runtime_checkable
class LocationRule(Scorer, Protocol):
    """A scorer that answers from the line ranges and the ground truth alone."""

    def match_run(self, issues: dict[str, list[catalog.Location]],
                  gt: catalog.GroundTruth) -> dict[str, Match]:
        """What each issue of one run is, by issue id: a run is graded as a whole, so a
        scorer can assign issues to defects one to one."""


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


@dataclasses.dataclass(frozen=True)
class TieredScorer:
    """Location tiers with a one-to-one assignment: each issue matches at most one TP
    occurrence (else one known-FP occurrence), and each occurrence at most one issue.
    Candidate pairs are taken best first: overlapping lines (more lines first), then within
    `near` lines (nearer first), then the same file; at equal closeness a TP before a FP,
    then by issue id, defect id and occurrence number, so the result never depends on
    order. The grade says the tier."""

    version: int
    near: int = 5
    name: str = "tiered"
    deterministic: bool = True

    @property
    def settings(self) -> dict[str, Any]:
        return {"near": self.near, "grades": {"overlap": GRADES[OVERLAP],
                                              "near": GRADES[NEAR],
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
                        if tier:
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

# What the grader grades every run with on a new log: location tiers, one to one, decoys by
# overlap only (tiered@1 stays, with its grades, for the history it graded).
DEFAULT_SCORER = "tiered@2"

SCORERS: dict[str, LocationRule] = {
    "overlap@1": OverlapScorer(version=1, tolerance=0),
    "overlap@2": OverlapScorer(version=2, tolerance=3),
    "tiered@1": TieredScorer(version=1, near=5),
    "tiered@2": StrictTieredScorer(version=2, near=5),
}


# People's verdicts (`grade.reviewed`) are the grades of a scorer of their own: compared with
# the rule scorers like any other (`props compare human@1 tiered@2`), never overwriting them.
HUMAN_NAME, HUMAN_VERSION = "human", 1
HUMAN = f"{HUMAN_NAME}@{HUMAN_VERSION}"
HUMAN_CODE_HASH = hashlib.sha256(b"props: people's verdicts, grade.reviewed, the newest per "
                                 b"issue").hexdigest()


def human_registration() -> catalog.ScorerRegistered:
    return catalog.ScorerRegistered(name=HUMAN_NAME, version=HUMAN_VERSION,
                                    code_hash=HUMAN_CODE_HASH,
                                    settings={"source": "grade.reviewed"}, deterministic=False)


def scorer(ref: str) -> Scorer:
    """The scorer named `NAME@VERSION`: built in, or an LLM judge of the scorers file."""
    from props.core.scoring import llm_judge  # it builds on this module

    found = SCORERS.get(ref) or llm_judge.configured().get(ref)
    if found is None:
        raise errors.UnknownScorer(
            f"unknown scorer {ref!r}; built in: {', '.join(SCORERS)}; LLM judges are "
            f"configured in {llm_judge.scorers_file()}")
    return found


def rule(ref: str) -> LocationRule:
    """The built-in location rule named `NAME@VERSION`."""
    found = SCORERS.get(ref)
    if found is None:
        raise errors.UnknownScorer(f"unknown location rule {ref!r}; built in: {', '.join(SCORERS)}")
    return found


def ref(s: Scorer) -> str:
    return streams.ref(s.name, s.version)


def registration(s: Scorer) -> catalog.ScorerRegistered:
    return catalog.ScorerRegistered(name=s.name, version=s.version, code_hash=s.code_hash,
                                    settings=s.settings, deterministic=s.deterministic)


@functools.lru_cache(maxsize=1024)
def _scorer_ref(name: str, version: int, code_hash: str,
                ground_truth_hash: str) -> catalog.ScorerRef:
    # The same for every grade of a run: built (and validated) once.
    return catalog.ScorerRef(name=name, version=version, code_hash=code_hash,
                             ground_truth_hash=ground_truth_hash)


def scorer_ref(s: Scorer, ground_truth_hash: str) -> catalog.ScorerRef:
    """Which scorer graded, against which ground truth: what every grade of it names."""
    return _scorer_ref(s.name, s.version, s.code_hash, ground_truth_hash)


def grade_event(s: Scorer, run_id: Any, issue_id: str, m: Match,
                ground_truth_hash: str) -> catalog.GradeEmitted:
    return catalog.GradeEmitted(
        critique_run_id=run_id, critique_issue_id=issue_id, tp_id=m.tp_id,
        tp_occurrence=m.tp_occurrence, fp_id=m.fp_id, grade=m.grade,
        scorer=scorer_ref(s, ground_truth_hash))

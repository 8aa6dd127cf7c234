"""Scorers: versioned, deterministic functions from (reported issue, ground truth) to a match.

A scorer is named and versioned (`overlap@2`). Its code hash covers its source and its
settings, so a grade says exactly what produced it; the ground-truth hash says what it was
computed against. Grading the same issues against the same ground truth with the same scorer
gives byte-identical grades. A released version's code is therefore frozen, by file: each
lives in its own module of `released/`, whose bytes a test holds to their digest; a new rule
is a new version in a new file, never an edit of the old one.

What counts as found: a TP match whose grade is full credit (FIND_GRADE) is a find; one with a
lower grade (tiered's near or same-file) is partial credit, reported apart as graded recall
and never as recall. The rule lives here and in the `run_scores` view, which reads it from
the stored grades.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Protocol, runtime_checkable

from props.core.domain import catalog, streams
from props.core.log import errors

# What a match is, and what counts as a find, named where every scorer (the judges too)
# reads them: matches (they were here, and the judges imported this module for them).
from props.core.scoring.matches import FIND_GRADE as FIND_GRADE
from props.core.scoring.matches import Match as Match
from props.core.scoring.released import overlap, tiered_1, tiered_2

# The released rules' classes, by the names the grader and re-scoring use.
OverlapScorer = overlap.OverlapScorer
TieredScorer = tiered_1.TieredScorer
StrictTieredScorer = tiered_2.StrictTieredScorer


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


# What the grader grades every run with on a new log: location tiers, one to one, decoys by
# overlap only (tiered@1 stays, with its grades, for the history it graded).
DEFAULT_SCORER = "tiered@2"

# The location rules by `NAME@VERSION`: the released ones, and any a caller registers.
SCORERS: dict[str, LocationRule] = {}
# The registered rules whose twin in SQL (the overlap rule, schema/queries/overlap.sql) grades
# on the server, with its tolerance: chosen by registration, never by a rule's class, so a
# rule built on another (a subclass that matches differently) is never graded by SQL that
# is not its own.
_SQL_TOLERANCE: dict[str, int] = {}


def register(s: LocationRule, *, sql_tolerance: int | None = None) -> LocationRule:
    """Make the rule known under its `NAME@VERSION`. `sql_tolerance`: the rule grades exactly
    as the overlap rule in SQL with that tolerance does, so re-scoring runs it on the server
    (its code hash must then cover that SQL, as overlap's does). A name and version is one
    rule: a second, different one is refused."""
    key = ref(s)
    held = SCORERS.get(key)
    if held is not None and held is not s:
        raise errors.ConfigurationError(f"a different scorer is registered as {key}: a new "
                                        f"rule is a new version")
    SCORERS[key] = s
    if sql_tolerance is not None:
        _SQL_TOLERANCE[key] = sql_tolerance
    return s


def unregister(s: LocationRule) -> None:
    """Forget a registered rule (a test's own, at its end)."""
    key = ref(s)
    if SCORERS.get(key) is s:
        del SCORERS[key]
        _SQL_TOLERANCE.pop(key, None)


def sql_tolerance(s: Scorer) -> int | None:
    """The tolerance the server's SQL rule grades `s` with; None: `s` grades in Python only
    (not registered with SQL, or not the rule registered under its name)."""
    key = ref(s)
    return _SQL_TOLERANCE.get(key) if SCORERS.get(key) is s else None


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


# The released rules (the overlap rule has its twin in SQL).
register(overlap.V1, sql_tolerance=overlap.V1.tolerance)
register(overlap.V2, sql_tolerance=overlap.V2.tolerance)
register(tiered_1.V1)
register(tiered_2.V2)

"""Grades and scorers: every grading edge under the scorer that produced it, the registered
scorers, and which one is active."""

from __future__ import annotations

from typing import cast

from props.core.domain import catalog
from props.core.log.events import RecordedEvent
from props.core.scoring import scorers
from props.projections.base import Derived, Projection
from props.projections.rows import RowMap, Source, field, item
from props.projections.tables import Column, Delta, Table
from props.schema import queries

# The newest grade of an issue under a scorer version replaces the one before, whole (a
# re-score against newer ground truth may find no match where there was one).
GRADING_EDGES = Table("grading_edges", (
    Column("critique_run_id", "uuid", "key"), Column("critique_issue_id", "text", "key"),
    Column("scorer_name", "text", "key"), Column("scorer_version", "integer", "key"),
    Column("code_hash", "text", "latest"), Column("ground_truth_hash", "text", "latest"),
    Column("tp_id", "text", "latest"), Column("tp_occurrence", "integer", "latest"),
    Column("fp_id", "text", "latest"), Column("grade", "float8", "latest"),
    Column("graded_at", "timestamptz", "latest"),
    # Why the scorer could not grade the issue (grades.unscorable; grade is then null).
    Column("unscorable", "text", "latest"),
))
# The grades counted per run, scorer, cited ground truth and TP occurrence matched ('' and 0:
# none): what the score views read (tens of thousands of rows where the grades are millions).
GRADE_OCCURRENCES = Table("grade_occurrences", (
    Column("reading", "text", "key"),  # both, or plain and adjudicated: occurrences.sql
    Column("run_id", "uuid", "key"), Column("scorer_name", "text", "key"),
    Column("scorer_version", "integer", "key"), Column("ground_truth_hash", "text", "key"),
    Column("tp_id", "text", "key"), Column("tp_occurrence", "integer", "key"),
    Column("best", "float8", "latest"), Column("graded", "bigint", "latest"),
    Column("finds", "bigint", "latest"), Column("partial", "bigint", "latest"),
    Column("known_fp", "bigint", "latest"), Column("unmatched", "bigint", "latest"),
    Column("unscorable", "bigint", "latest"),
))
# Per run, location rule and cited ground truth: what the run's issues would score by chance
# (grades.chance, props.core.scoring.chance), the newest replacing the one before. The score
# views sum the occurrences in the example's scope, as they sum recall.
GRADE_CHANCES = Table("grade_chances", (
    Column("run_id", "uuid", "key"), Column("scorer_name", "text", "key"),
    Column("scorer_version", "integer", "key"), Column("ground_truth_hash", "text", "key"),
    Column("null_model", "text", "latest"), Column("issues", "integer", "latest"),
    Column("occurrences", "jsonb", "latest"), Column("computed_at", "timestamptz", "latest"),
))
_OCCURRENCES = queries.load("occurrences")


def counted(edges: str) -> str:
    """The SQL that counts the grades `edges` (a table, filtered maybe) into occurrences."""
    return _OCCURRENCES["grouping"].replace("{edges}", edges)


def adjudicated(edges: str, human: str) -> str:
    """The SQL of the grades `edges` with the verdicts `human` standing in."""
    return _OCCURRENCES["adjudicated"].replace("{edges}", edges).replace("{human}", human)


_HUMAN = "scorer_name = 'human' AND scorer_version = 1"
_OF_REVIEWED_RUNS = "critique_run_id IN (SELECT run_id FROM reviewed)"  # (see its `count`)


def _count(where: str) -> str:
    """Occurrences' `count` of the grades `where` (SQL over grading_edges) picks."""
    return _OCCURRENCES["count"].replace(
        "{plain}", counted(f"{{schema}}.grading_edges WHERE {where}")).replace(
        "{adjudicated}", counted("(" + adjudicated(
            f"(SELECT * FROM {{schema}}.grading_edges WHERE {where} AND {_OF_REVIEWED_RUNS})",
            f"(SELECT * FROM {{schema}}.grading_edges WHERE {_OF_REVIEWED_RUNS} AND {_HUMAN})")
            + ") adjudicated"))


# The verdicts that the `scored_edges` view lets stand in: none unless the report asks.
SCORED_EDGES = adjudicated("{schema}.grading_edges", (
    "(SELECT * FROM {schema}.grading_edges WHERE current_setting('props.adjudicated', true) "
    f"= 'on' AND {_HUMAN})"))


SCORERS = Table("scorers", (
    Column("name", "text", "key"), Column("version", "integer", "key"),
    Column("code_hash", "text"), Column("deterministic", "boolean"),
    Column("registered_at", "timestamptz"),
))
# The scorers whose exact bytes passed a verification here (scorer.verified, completed and
# passing the policy then in force, not imported): only such a judge confirms a find.
VERIFIED_SCORERS = Table("verified_scorers", (
    Column("name", "text", "key"), Column("version", "integer", "key"),
    Column("code_hash", "text", "key"), Column("verified_at", "timestamptz", "first"),
))
ACTIVE_SCORER = Table("active_scorer", (
    Column("singleton", "boolean", "key"), Column("name", "text"), Column("version", "integer"),
    Column("activated_at", "timestamptz"),
))


# Scorers are registered and activated a handful of times in a log's life: folded in Python,
# they cost no scan of every chunk of a rebuild.
def registered(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.ScorerRegistered, rec.event)
    delta.put("scorers", name=e.name, version=e.version, code_hash=e.code_hash,
              deterministic=e.deterministic, registered_at=rec.recorded_at)


def verified(delta: Delta, rec: RecordedEvent) -> None:
    e = cast(catalog.ScorerVerified, rec.event)
    if e.status == "completed" and e.passed and not rec.imported:
        delta.put("verified_scorers", name=e.name, version=e.version, code_hash=e.code_hash,
                  verified_at=rec.recorded_at)


def activated(delta: Delta, rec: RecordedEvent) -> None:
    if rec.imported:  # its origin's active scorer, not this database's
        return
    e = cast(catalog.ActiveScorerSet, rec.event)
    delta.put("active_scorer", singleton=True, name=e.name, version=e.version,
              activated_at=rec.recorded_at)


# What a grade shares with the other grades of its run, and what it says of its issue.
_GRADED: dict[str, Source] = {
    "critique_run_id": field("critique_run_id"),
    "scorer_name": field("scorer", "name"), "scorer_version": field("scorer", "version"),
    "code_hash": field("scorer", "code_hash"),
    "ground_truth_hash": field("scorer", "ground_truth_hash"), "graded_at": "recorded_at"}
_MATCH = ("tp_id", "tp_occurrence", "fp_id", "grade")

# A person's verdict is a grade of the `human` scorer: full credit for a TP it names.
_REVIEWED: dict[str, Source] = {
    "critique_run_id": field("critique_run_id"), "critique_issue_id": field("critique_issue_id"),
    "scorer_name": f"'{scorers.HUMAN_NAME}'", "scorer_version": str(scorers.HUMAN_VERSION),
    "code_hash": f"'{scorers.HUMAN_CODE_HASH}'",
    "ground_truth_hash": field("ground_truth_hash"), "tp_id": field("tp_id"),
    "tp_occurrence": field("tp_occurrence"), "fp_id": field("fp_id"),
    "grade": "CASE WHEN data->>'tp_id' IS NULL THEN 0 ELSE 1 END", "graded_at": "recorded_at"}

GRADING = Projection(
    name="grading",
    # 2: grades.emitted; a newer grade replaces an older one whole. 3: the score views
    # (remade with the tables) tell finds from partial credit; people's verdicts. 4: the
    # views remade set-based (run_scores folds every run's grades in one pass); issues a
    # scorer could not grade (grades.unscorable). 5: the grades counted per occurrence
    # (grade_occurrences), which the score views read. 6: the views made again with
    # run_confirmations (located finds a judge or a person confirmed). 7: the chance level
    # of each run (grade_chances, grades.chance), beside recall in the score views. 8: only
    # a verified judge confirms (verified_scorers, scorer.verified).
    version=8,
    tables=(GRADING_EDGES, GRADE_OCCURRENCES, GRADE_CHANCES, SCORERS, VERIFIED_SCORERS,
            ACTIVE_SCORER),
    rows=(
        # One grade an event (the grader reactor), or a run's grades in one (the server).
        RowMap(catalog.GradeEmitted, GRADING_EDGES, {
            **_GRADED, "critique_issue_id": field("critique_issue_id"),
            **{name: field(name) for name in _MATCH}}),
        RowMap(catalog.GradesEmitted, GRADING_EDGES, each="grades", columns={
            **_GRADED, "critique_issue_id": item("issue_id"),
            **{name: item(name) for name in _MATCH}}),
        RowMap(catalog.GradeReviewed, GRADING_EDGES, _REVIEWED),
        RowMap(catalog.GradesUnscorable, GRADING_EDGES, each="issues", columns={
            **_GRADED, "critique_issue_id": item("issue_id"), "unscorable": item("reason")}),
        RowMap(catalog.GradesChance, GRADE_CHANCES, {
            "run_id": field("critique_run_id"), "scorer_name": field("scorer", "name"),
            "scorer_version": field("scorer", "version"),
            "ground_truth_hash": field("scorer", "ground_truth_hash"),
            "null_model": field("null_model"), "issues": field("issues"),
            "occurrences": field("occurrences"), "computed_at": "recorded_at"}),
    ),
    folds={"scorer.registered": registered, "scorer.activated": activated,
           "scorer.verified": verified},
    derived=(Derived(
        GRADE_OCCURRENCES, GRADING_EDGES, touched=_OCCURRENCES["touched"],
        forget=_OCCURRENCES["forget"],
        count=_count("critique_run_id = ANY ($1::uuid[]) AND ($2::text IS NULL "
                     "OR (scorer_name = $2::text AND scorer_version = $3::int))"),
        count_all=_count("true")),),
)

"""Grades and scorers: every grading edge under the scorer that produced it, the registered
scorers, and which one is active."""

from __future__ import annotations

from typing import cast

from props.core.domain import catalog
from props.core.log.events import RecordedEvent
from props.core.scoring import scorers
from props.projections.base import Projection
from props.projections.rows import RowMap, Source, field, item
from props.projections.tables import Column, Delta, Table

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
SCORERS = Table("scorers", (
    Column("name", "text", "key"), Column("version", "integer", "key"),
    Column("code_hash", "text"), Column("deterministic", "boolean"),
    Column("registered_at", "timestamptz"),
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


def activated(delta: Delta, rec: RecordedEvent) -> None:
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
    # scorer could not grade (grades.unscorable).
    version=4,
    tables=(GRADING_EDGES, SCORERS, ACTIVE_SCORER),
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
    ),
    folds={"scorer.registered": registered, "scorer.activated": activated},
)

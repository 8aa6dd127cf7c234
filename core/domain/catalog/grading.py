"""What each reported issue is, by scorer (streams grading-<run>-<scorer>), the scorers
themselves (scorer-<name>), people's verdicts (review-<run>) and runs left out of every
score."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import pydantic

from props.core.domain.catalog.parts import (
    MAX_RUN_EVENTS,
    REGISTRY,
    Name,
    ScorerRef,
    Sha256,
    Version,
    _Part,
)
from props.core.log.events import Event

# -- grading (stream grading-<run>-<scorer>) ----------------------------------------------------


def _check_match(tp_id: str | None, tp_occurrence: int | None, fp_id: str | None) -> None:
    if tp_id is not None and fp_id is not None:
        raise ValueError("an issue matches a true positive or a false positive, not both")
    if (tp_id is None) != (tp_occurrence is None):
        raise ValueError("a true-positive match names the occurrence it found (tp_occurrence)")


@REGISTRY.register
class GradeEmitted(Event):
    type_name = "grade.emitted"
    critique_run_id: uuid.UUID
    critique_issue_id: Name
    tp_id: Name | None = None
    # which occurrence (#n)
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1, le=1000)
    fp_id: Name | None = None
    grade: float = pydantic.Field(ge=0, le=1, allow_inf_nan=False)
    scorer: ScorerRef

    @pydantic.model_validator(mode="after")
    def _one_match(self) -> GradeEmitted:
        _check_match(self.tp_id, self.tp_occurrence, self.fp_id)
        return self


class IssueGrade(_Part):
    """One issue's grade inside `grades.emitted`: the fields of `grade.emitted` an issue
    does not share with the other issues of its run."""

    issue_id: Name
    tp_id: Name | None = None
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1, le=1000)
    fp_id: Name | None = None
    grade: float = pydantic.Field(ge=0, le=1, allow_inf_nan=False)

    @pydantic.model_validator(mode="after")
    def _one_match(self) -> IssueGrade:
        _check_match(self.tp_id, self.tp_occurrence, self.fp_id)
        return self


@REGISTRY.register
class GradesEmitted(Event):
    """Every grade of one run under one scorer and ground truth, in one event: how grading
    on the server appends a run (a re-score of a million issues appends ten thousand events,
    not a million). Projects exactly as one `grade.emitted` per issue would."""

    type_name = "grades.emitted"
    critique_run_id: uuid.UUID
    scorer: ScorerRef
    grades: list[IssueGrade] = pydantic.Field(min_length=1, max_length=MAX_RUN_EVENTS)


class IssueUnscorable(_Part):
    issue_id: Name
    reason: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=500)]


@REGISTRY.register
class GradesUnscorable(Event):
    """Issues of one run a scorer looked at and could not grade, each with why (an LLM
    judge's answer that names no known item, no majority among its draws): never counted as
    "matches nothing". The issue's row in grading_edges says so, until a later grade of it
    replaces it; a run with such an issue is unscorable under that scorer."""

    type_name = "grades.unscorable"
    critique_run_id: uuid.UUID
    scorer: ScorerRef
    issues: list[IssueUnscorable] = pydantic.Field(min_length=1, max_length=MAX_RUN_EVENTS)


class OccurrenceChance(_Part):
    """One TP occurrence's chance inside `grades.chance`: the probability that the run's
    issues, moved at random (the null model), find it at full credit, and the best grade
    they would give it, expected."""

    tp_id: Name
    tp_occurrence: int = pydantic.Field(ge=1, le=1000)
    found: float = pydantic.Field(ge=0, le=1, allow_inf_nan=False)
    graded: float = pydantic.Field(ge=0, le=1, allow_inf_nan=False)


@REGISTRY.register
class GradesChance(Event):
    """What a location rule's grades of one run would be by chance (props.core.scoring.
    chance): per TP occurrence of the ground truth that the run's issues could reach at all,
    the probability of a find and the expected best grade when every issue keeps its file
    and span and the run's issues in a file are rotated together to a uniformly random
    offset (`null_model`). The occurrences left out have chance 0; a run with no issue has
    none. Recall's chance level is the sum over the occurrences in the example's scope."""

    type_name = "grades.chance"
    critique_run_id: uuid.UUID
    scorer: ScorerRef
    null_model: Name
    issues: int = pydantic.Field(ge=0, le=MAX_RUN_EVENTS)  # the candidates moved
    occurrences: list[OccurrenceChance] = pydantic.Field(default_factory=list,
                                                         max_length=MAX_RUN_EVENTS)


# -- scorers (stream scorer-<name>) --------------------------------------------------------------


@REGISTRY.register
class ScorerRegistered(Event):
    type_name = "scorer.registered"
    name: Name
    version: Version
    code_hash: Sha256
    settings: dict[str, Any] = pydantic.Field(default_factory=dict)
    deterministic: bool = True


@REGISTRY.register
class ActiveScorerSet(Event):
    type_name = "scorer.activated"
    name: Name
    version: Version


# -- people's verdicts (stream review-<run uuid>) -----------------------------------------------


@REGISTRY.register
class GradeReviewed(Event):
    """A person's verdict on one reported issue: the match they give it (a TP occurrence, a
    decoy, or none), against the ground truth they judged with. It never replaces a
    scorer's grade: the verdicts are the grades of their own scorer, `human@1`, and the
    newest verdict on an issue stands. `confirms` names the grade it agreed with, if any."""

    type_name = "grade.reviewed"
    critique_run_id: uuid.UUID
    critique_issue_id: Name
    tp_id: Name | None = None
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1, le=1000)
    fp_id: Name | None = None
    ground_truth_hash: Sha256
    confirms: ScorerRef | None = None
    reviewer: Name
    note: Annotated[str, pydantic.StringConstraints(max_length=2000)] = ""

    @pydantic.model_validator(mode="after")
    def _one_match(self) -> GradeReviewed:
        _check_match(self.tp_id, self.tp_occurrence, self.fp_id)
        return self


@REGISTRY.register
class RunExcluded(Event):
    """A run that must not count (a broken container image, a leaked answer key): left out
    of every score from now on, and counted as excluded, with the reason."""

    type_name = "run.excluded"
    run_id: uuid.UUID
    reason: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=2000)]
    excluded_by: Name | None = None

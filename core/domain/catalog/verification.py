"""A scorer's verification before it may grade the headline (stream verification-<id>, and
its outcome in the scorer's own stream, scorer-<name>): a frozen cohort of recorded runs
replayed under a candidate beside the scorer it would replace, every reported issue in one
bucket, and the activation that is gated on it (props.core.scoring.verification)."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

import pydantic

from props.core.domain.catalog.parts import (
    MAX_RUN_EVENTS,
    REGISTRY,
    Count,
    Milliseconds,
    Name,
    NonNegative,
    Sha256,
    TokenTotal,
    Version,
    _Part,
)
from props.core.log.events import Event

Reason = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=500)]
Share = Annotated[float, pydantic.Field(ge=0, le=1, allow_inf_nan=False)]
Delta = Annotated[float, pydantic.Field(ge=-1, le=1, allow_inf_nan=False)]
VerificationStatus = Literal["completed", "partial", "failed", "cancelled"]
# Why an issue has no bucket of its own: never dropped, always one of these.
DivergenceReason = Literal["judge unreachable", "judge answer unreadable", "run unscorable",
                           "version mismatch"]
CohortKind = Literal["evaluation", "as-of"]


class IssueVerdict(_Part):
    """One issue's word under the candidate: a match, or why it gave none."""

    issue_id: Name
    tp_id: Name | None = None
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1, le=1000)
    fp_id: Name | None = None
    grade: float = pydantic.Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    unscorable: Reason | None = None


@REGISTRY.register
class VerificationReplayed(Event):
    """One run of the cohort replayed under a candidate that asks a model: its verdicts and
    what the calls cost, recorded as soon as they are known, so a verification killed in the
    middle resumes without asking the model again about this run. The answers are blobs
    (their sha256), as any LLM answer; the calls are not `llm.*` events (they belong to no
    grading of history)."""

    type_name = "verification.replayed"
    verification_id: uuid.UUID
    run_id: uuid.UUID
    identity_hash: Sha256
    ground_truth_hash: Sha256
    verdicts: list[IssueVerdict] = pydantic.Field(max_length=MAX_RUN_EVENTS)
    answers: list[Sha256] = pydantic.Field(default_factory=list, max_length=1000)
    tokens_in: TokenTotal = 0
    tokens_out: TokenTotal = 0
    cost_usd: NonNegative = 0.0
    model_ms: Milliseconds = 0.0


Bucket = Literal["unchanged", "newly credited", "newly uncredited", "credited elsewhere",
                 "diverged"]
Word = Annotated[str, pydantic.StringConstraints(max_length=200)]


class IssueBucketed(_Part):
    """One reported issue of the cohort: its bucket, each scorer's word on it as a person
    reads it, and, if it diverged, why."""

    issue_id: Name
    bucket: Bucket
    before: Word  # the scorer replaced
    after: Word  # the candidate
    reason: DivergenceReason | None = None
    detail: Annotated[str, pydantic.StringConstraints(max_length=500)] = ""


@REGISTRY.register
class VerificationBucketed(Event):
    """Where one run's issues landed in a verification (stream verification-<id>), recorded
    with its outcome so that the divergence report (`props scorers show-verification`, the
    viewer's page) is read from the log, never recomputed. A run bucketed again with another
    outcome is a new event: the last one counts."""

    type_name = "verification.bucketed"
    verification_id: uuid.UUID
    run_id: uuid.UUID
    issues: list[IssueBucketed] = pydantic.Field(max_length=MAX_RUN_EVENTS)


class CaseScore(_Part):
    case_id: Name
    issues: Count
    right: Count


@REGISTRY.register
class VerificationLabelled(Event):
    """The candidate on the labelled grading cases (props.core.scoring.evaluation), once per
    verification: per case, its issues and those it got right (the interval's clusters)."""

    type_name = "verification.labelled"
    verification_id: uuid.UUID
    identity_hash: Sha256
    cases_sha256: Sha256  # of the cases as read: another folder is another measurement
    scores: list[CaseScore] = pydantic.Field(max_length=100_000)
    confusion: dict[Name, Count] = pydantic.Field(default_factory=dict, max_length=50)


class Cohort(_Part):
    """A named, frozen set of recorded runs: an evaluation's (every version and attempt) or
    the runs finished at a point of the log. Its id is a hash of its run ids."""

    kind: CohortKind
    name: Name  # the evaluation's name, or the log position
    cohort_id: Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{16}$")]
    runs: Count


class Diverged(_Part):
    reason: DivergenceReason
    issues: Count


class CriticChange(_Part):
    """One critic's (model, definition) recall under the scorer replaced and the candidate,
    and the paired cluster bootstrap's interval of the difference over the examples."""

    model: Name
    definition: Name
    runs: Count
    recall_before: Share | None = None
    recall_after: Share | None = None
    delta: Delta | None = None
    low: Delta | None = None
    high: Delta | None = None


class Agreement(_Part):
    """Agreement with a reference (labelled cases, people's verdicts) over `issues`, with the
    cluster bootstrap's interval (clusters: cases, or runs)."""

    issues: Count
    agreed: Count
    share: Share | None = None
    low: Share | None = None
    high: Share | None = None


@REGISTRY.register
class ScorerVerified(Event):
    """A verification's outcome, in the candidate's own stream (scorer-<name>): which exact
    bytes (`identity_hash`) were replayed on which cohort beside which scorer, every issue
    of the cohort in one bucket (unchanged, newly credited, newly uncredited, credited to
    another defect, or diverged with a reason), the figures' change per critic, agreement
    with the labelled cases and with people, and the cost. Activation is gated on it."""

    type_name = "scorer.verified"
    verification_id: uuid.UUID
    name: Name
    version: Version
    identity_hash: Sha256
    code_hash: Sha256  # what its grades name: only a judge verified so confirms a find
    against: Name | None = None  # NAME@VERSION of the scorer it was set beside
    against_identity: Sha256 | None = None
    cohort: Cohort
    status: VerificationStatus
    candidates: Count  # the cohort's reported issues: the buckets add up to it
    unchanged: Count = 0
    newly_credited: Count = 0
    newly_uncredited: Count = 0
    credited_elsewhere: Count = 0
    diverged: list[Diverged] = pydantic.Field(default_factory=list, max_length=10)
    replayed_runs: Count = 0
    critics: list[CriticChange] = pydantic.Field(default_factory=list, max_length=10_000)
    labels: Agreement | None = None
    people: Agreement | None = None
    tokens_in: TokenTotal = 0
    tokens_out: TokenTotal = 0
    cost_usd: NonNegative = 0.0
    model_ms: Milliseconds = 0.0
    # The operator's policy when it was recorded (props.core.scoring.gate): what it fell
    # short of, if anything. Activation asks the policy in force again.
    passed: bool = False
    short_of: list[Reason] = pydantic.Field(default_factory=list, max_length=20)

    @pydantic.model_validator(mode="after")
    def _adds_up(self) -> ScorerVerified:
        buckets = self.unchanged + self.newly_credited + self.newly_uncredited \
            + self.credited_elsewhere + sum(d.issues for d in self.diverged)
        if buckets != self.candidates:
            raise ValueError(f"the buckets hold {buckets} issues, the cohort {self.candidates}")
        return self


@REGISTRY.register
class ScorerForced(Event):
    """An activation the gate refused, made anyway: who, why, and what the gate said. It is
    appended with the `scorer.activated` it explains, and every figure the scorer grades
    says so."""

    type_name = "scorer.forced"
    name: Name
    version: Version
    identity_hash: Sha256
    reason: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=2000)]
    actor: Name
    refused: Annotated[str, pydantic.StringConstraints(max_length=2000)] = ""

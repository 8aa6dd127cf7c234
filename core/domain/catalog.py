"""Every event the pipeline emits, by stream category.

Streams: `snapshot-<project>/<date-nn>`, `definition-<critic|grader>`, `run-<uuid>`,
`grading-<run>-<scorer>`, `scorer-<name>`, `reactor-<name>`. Large content (prompt bytes,
LLM messages, container logs) is stored once in the blob table and referenced by sha256.
Change a type's fields only by raising its `schema_version` and registering an upcaster from
the old version in this module.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import pydantic

from props.core.log.events import Event, EventRegistry

REGISTRY = EventRegistry()

Sha256 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Md5 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200)]
SnapshotSlug = Annotated[
    str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*/\d{4}-\d{2}-\d{2}-\d{2}$")
]
NonNegative = Annotated[float, pydantic.Field(ge=0)]
Count = Annotated[int, pydantic.Field(ge=0)]

AgentType = Literal["critic", "grader"]
RunStatus = Literal["requested", "running", "completed", "failed", "timed_out",
                    "budget_exceeded", "cancelled"]
TerminalStatus = Literal["completed", "failed", "timed_out", "budget_exceeded", "cancelled"]
Severity = Literal["info", "low", "medium", "high", "critical"]


class _Part(pydantic.BaseModel):
    """A value nested inside an event: same strictness as events."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class LineRange(_Part):
    start: int = pydantic.Field(ge=1)
    end: int = pydantic.Field(ge=1)

    @pydantic.model_validator(mode="after")
    def _ordered(self) -> LineRange:
        if self.end < self.start:
            raise ValueError(f"line range ends ({self.end}) before it starts ({self.start})")
        return self


class Location(_Part):
    file: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=1000)]
    ranges: list[LineRange] = pydantic.Field(default_factory=list)


class Example(_Part):
    """What a critic reviews: a whole snapshot (files_hash None) or one of its file sets."""

    snapshot: SnapshotSlug
    files_hash: Md5 | None = None


class FileEntry(_Part):
    path: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=1000)]
    sha256: Sha256
    size: Count


class Failure(_Part):
    """Closed facts about a failure: never free text that could carry a secret."""

    phase: Name
    category: Name
    retryable: bool
    exit_code: int | None = None


class Occurrence(_Part):
    """Where one occurrence of a defect (or decoy) lies: one or more files, as line ranges."""

    locations: list[Location] = pydantic.Field(min_length=1)

    @property
    def files(self) -> set[str]:
        return {loc.file for loc in self.locations}


class TruePositive(_Part):
    id: Name
    rationale: str
    severity: Severity | None = None
    occurrences: list[Occurrence] = pydantic.Field(min_length=1)


class FalsePositive(_Part):
    """A known non-defect that looks like one (a decoy): reporting it is a known-false finding."""

    id: Name
    rationale: str
    relevant_files: list[str]
    occurrences: list[Occurrence] = pydantic.Field(min_length=1)


class FileSet(_Part):
    name: Name
    files: list[str] = pydantic.Field(min_length=1)  # sorted
    files_hash: Md5  # md5 of the sorted member paths, one per line


class Scope(_Part):
    """The TP occurrences ("<tp id>#<n>", n from 1) a critic reviewing an example can be
    expected to find: recall's denominator. `files_hash` None: the whole snapshot."""

    files_hash: Md5 | None
    occurrences: list[str]


class GroundTruth(_Part):
    true_positives: list[TruePositive]
    false_positives: list[FalsePositive]
    file_sets: list[FileSet]
    scopes: list[Scope]


class ScorerRef(_Part):
    name: Name
    version: int = pydantic.Field(ge=1)
    code_hash: Sha256
    ground_truth_hash: Sha256


# -- snapshots (stream snapshot-<slug>) ----------------------------------------------------


@REGISTRY.register
class SnapshotSynced(Event):
    type_name = "snapshot.synced"
    slug: SnapshotSlug
    version: int = pydantic.Field(ge=1)
    files: list[FileEntry]  # contents in the blob table, by sha256
    ground_truth: GroundTruth
    ground_truth_hash: Sha256  # sha256 of the ground truth's canonical JSON
    source: str  # the specimen directory it was synced from (retirement is per source)


@REGISTRY.register
class SnapshotRetired(Event):
    type_name = "snapshot.retired"
    slug: SnapshotSlug
    version: int = pydantic.Field(ge=1)  # the last version, which stays readable
    reason: Name


# -- agent definitions (stream definition-<agent type>) --------------------------------------


Digest = Annotated[str, pydantic.StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class AgentLimits(_Part):
    """What a run of a definition may use; the launcher enforces each."""

    network: bool = False  # no network unless the definition asks
    cpus: float = pydantic.Field(default=1.0, gt=0)
    memory_mb: int = pydantic.Field(default=512, ge=16)
    max_events: int = pydantic.Field(default=2000, ge=1)  # reported by the agent
    max_bytes: int = pydantic.Field(default=64 * 1024 * 1024, ge=1)  # events + blobs


@REGISTRY.register
class DefinitionPushed(Event):
    """An agent image recorded under `name:tag`, by the digest the engine gave it.
    `runtime` "local" means a command run on the host (`image` names it), with the digest
    of what it runs."""

    type_name = "definition.pushed"
    schema_version = 2
    agent_type: AgentType
    name: Name
    tag: Name
    digest: Digest
    runtime: Literal["docker", "local"] = "docker"
    image: Name | None = None  # the reference it was pushed as
    command: list[str] = pydantic.Field(default_factory=list)  # empty: the image's own
    config: dict[str, Any] = pydantic.Field(default_factory=dict)  # given to the agent
    limits: AgentLimits = pydantic.Field(default_factory=AgentLimits)
    # Mount the host's Python and props read-only into the container: for the small images
    # `props definitions build-reference` makes with `docker import`, which carry no Python.
    host_python: bool = False


@REGISTRY.upcaster("definition.pushed", 1)
def _definition_v1(data: dict[str, Any]) -> dict[str, Any]:
    return data  # v2 only added fields with defaults


# -- critic and grader runs (stream run-<uuid>) ------------------------------------------------


@REGISTRY.register
class RunRequested(Event):
    type_name = "run.requested"
    run_id: uuid.UUID
    agent_type: AgentType
    definition: Name
    definition_ref: Name = "latest"  # "latest" or a digest; RunStarted records what was used
    example: Example
    model: Name
    timeout_seconds: float = pydantic.Field(gt=0)
    budget_usd: NonNegative
    requested_by: Name | None = None


@REGISTRY.register
class RunStarted(Event):
    type_name = "run.started"
    run_id: uuid.UUID
    digest: Digest


@REGISTRY.register
class ContainerStarted(Event):
    type_name = "container.started"
    run_id: uuid.UUID
    runtime: Literal["docker", "local"]
    container_name: Name
    container_id: Name


@REGISTRY.register
class ContainerExited(Event):
    type_name = "container.exited"
    run_id: uuid.UUID
    exit_code: int | None  # None: killed before it reported one
    oom_killed: bool = False
    killed_for: Literal["timeout", "budget", "cancel"] | None = None
    logs_sha256: Sha256 | None = None
    duration_seconds: NonNegative


@REGISTRY.register
class PromptComposed(Event):
    type_name = "prompt.composed"
    run_id: uuid.UUID
    prompt_sha256: Sha256  # the exact bytes sent, in the blob table
    size: Count
    template: Name | None = None


@REGISTRY.register
class LlmRequested(Event):
    """One model call. The conversation is the list of message blobs, each stored once."""

    type_name = "llm.requested"
    run_id: uuid.UUID
    request_id: Name
    model: Name
    message_sha256s: list[Sha256]


@REGISTRY.register
class LlmResponded(Event):
    type_name = "llm.responded"
    run_id: uuid.UUID
    request_id: Name
    response_sha256: Sha256
    tokens_in: Count
    tokens_out: Count
    cost_usd: NonNegative
    latency_ms: NonNegative


@REGISTRY.register
class PhaseCompleted(Event):
    type_name = "phase.completed"
    run_id: uuid.UUID
    phase: Name
    duration_seconds: NonNegative


@REGISTRY.register
class IssueReported(Event):
    type_name = "issue.reported"
    run_id: uuid.UUID
    issue_id: Name
    rationale: Annotated[str, pydantic.StringConstraints(max_length=20_000)]
    locations: list[Location] = pydantic.Field(min_length=1)
    severity: Severity | None = None


@REGISTRY.register
class RunCancelRequested(Event):
    type_name = "run.cancel_requested"
    run_id: uuid.UUID
    requested_by: Name | None = None


@REGISTRY.register
class RunFinished(Event):
    type_name = "run.finished"
    run_id: uuid.UUID
    status: TerminalStatus
    failure: Failure | None = None
    tokens_in: Count = 0
    tokens_out: Count = 0
    cost_usd: NonNegative = 0.0

    @pydantic.model_validator(mode="after")
    def _failure_matches_status(self) -> RunFinished:
        if self.status == "completed" and self.failure is not None:
            raise ValueError("a completed run carries no failure")
        if self.status == "failed" and self.failure is None:
            raise ValueError("a failed run must say how it failed (failure)")
        return self


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
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1)  # which occurrence (#n)
    fp_id: Name | None = None
    grade: float = pydantic.Field(ge=0, le=1)
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
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1)
    fp_id: Name | None = None
    grade: float = pydantic.Field(ge=0, le=1)

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
    grades: list[IssueGrade] = pydantic.Field(min_length=1)


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
    issues: list[IssueUnscorable] = pydantic.Field(min_length=1)


# -- scorers (stream scorer-<name>) --------------------------------------------------------------


@REGISTRY.register
class ScorerRegistered(Event):
    type_name = "scorer.registered"
    name: Name
    version: int = pydantic.Field(ge=1)
    code_hash: Sha256
    settings: dict[str, Any] = pydantic.Field(default_factory=dict)
    deterministic: bool = True


@REGISTRY.register
class ActiveScorerSet(Event):
    type_name = "scorer.activated"
    name: Name
    version: int = pydantic.Field(ge=1)


# -- reactors (stream reactor-<name>) ------------------------------------------------------------


@REGISTRY.register
class EventParked(Event):
    """A reactor gave up on an event (a poison event) and went on; the error is kept here."""

    type_name = "event.parked"
    reactor: Name
    event_id: uuid.UUID
    global_position: int = pydantic.Field(ge=1)
    error_type: Name
    error_message: Annotated[str, pydantic.StringConstraints(max_length=4000)]
    attempts: int = pydantic.Field(ge=1)


# -- retention (stream retention-<run uuid>) ----------------------------------------------------


@REGISTRY.register
class RetentionHeld(Event):
    """Keep a run's events in the hot table: `props archive` skips every partition that holds
    any of them until the hold is released."""

    type_name = "retention.held"
    run_id: uuid.UUID
    reason: Annotated[str, pydantic.StringConstraints(min_length=1, max_length=2000)]
    held_by: Name | None = None


@REGISTRY.register
class RetentionReleased(Event):
    type_name = "retention.released"
    run_id: uuid.UUID
    released_by: Name | None = None


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
    tp_occurrence: int | None = pydantic.Field(default=None, ge=1)
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


# -- imports (stream import-<archive id>) -------------------------------------------------------


class ImportedRun(_Part):
    run_id: uuid.UUID


@REGISTRY.register
class ArchiveImported(Event):
    """An export file was imported: where it came from (its signer, or none) and the critic
    runs it brought, so that every score can say how much of it rests on imported runs.
    A file that brings many runs is recorded in several parts."""

    type_name = "archive.imported"
    archive_id: Name
    sha256: Sha256
    signer: Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{16}$")] | None
    events: Count
    imported: Count
    part: int = pydantic.Field(ge=1)
    runs: list[ImportedRun] = pydantic.Field(max_length=5000)


# Last: every type above registered, each has its upcasters.
REGISTRY.check_complete()

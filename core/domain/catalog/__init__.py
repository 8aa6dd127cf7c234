"""Every event the pipeline emits, by stream category.

Streams: `snapshot-<project>/<date-nn>`, `definition-<critic|grader>`, `run-<uuid>`,
`grading-<run>-<scorer>`, `scorer-<name>`, `reactor-<name>`. Large content (prompt bytes,
LLM messages, container logs) is stored once in the blob table and referenced by sha256.
Change a type's fields only by raising its `schema_version` and registering an upcaster from
the old version beside it. One module per stream category; this package's namespace holds
them all (`catalog.RunFinished`), and its last line checks that every type registered.
"""

from __future__ import annotations

from props.core.domain.catalog.grading import (
    ActiveScorerSet,
    GradeEmitted,
    GradeReviewed,
    GradesEmitted,
    GradesUnscorable,
    IssueGrade,
    IssueUnscorable,
    RunExcluded,
    ScorerRegistered,
)
from props.core.domain.catalog.operations import (
    ArchiveImported,
    EventParked,
    ImportedRun,
    LauncherStarted,
    ParkedRetried,
    RetentionHeld,
    RetentionReleased,
)
from props.core.domain.catalog.parts import (
    REGISTRY,
    Count,
    Digest,
    Example,
    Failure,
    FalsePositive,
    FileEntry,
    FileSet,
    GroundTruth,
    LauncherName,
    LineRange,
    Location,
    Md5,
    Name,
    NonNegative,
    Occurrence,
    Scope,
    ScorerRef,
    Sha256,
    SnapshotSlug,
    TruePositive,
)
from props.core.domain.catalog.runs import (
    ContainerExited,
    ContainerStarted,
    IssueReported,
    LlmRequested,
    LlmResponded,
    PhaseCompleted,
    PromptComposed,
    RunCancelRequested,
    RunClaimed,
    RunFinished,
    RunRequested,
    RunStarted,
)
from props.core.domain.catalog.snapshots import (
    AgentLimits,
    DefinitionPushed,
    SnapshotRetired,
    SnapshotSynced,
)
from props.core.domain.vocabulary import AgentType, RunStatus, Severity, TerminalStatus

__all__ = [
    "REGISTRY",
    "ActiveScorerSet",
    "AgentLimits",
    "AgentType",
    "ArchiveImported",
    "ContainerExited",
    "ContainerStarted",
    "Count",
    "DefinitionPushed",
    "Digest",
    "EventParked",
    "Example",
    "Failure",
    "FalsePositive",
    "FileEntry",
    "FileSet",
    "GradeEmitted",
    "GradeReviewed",
    "GradesEmitted",
    "GradesUnscorable",
    "GroundTruth",
    "ImportedRun",
    "IssueGrade",
    "IssueReported",
    "IssueUnscorable",
    "LauncherName",
    "LauncherStarted",
    "LineRange",
    "LlmRequested",
    "LlmResponded",
    "Location",
    "Md5",
    "Name",
    "NonNegative",
    "Occurrence",
    "ParkedRetried",
    "PhaseCompleted",
    "PromptComposed",
    "RetentionHeld",
    "RetentionReleased",
    "RunCancelRequested",
    "RunClaimed",
    "RunExcluded",
    "RunFinished",
    "RunRequested",
    "RunStarted",
    "RunStatus",
    "Scope",
    "ScorerRef",
    "ScorerRegistered",
    "Severity",
    "Sha256",
    "SnapshotRetired",
    "SnapshotSlug",
    "SnapshotSynced",
    "TerminalStatus",
    "TruePositive",
]

# Last: every module above imported, so every type registered, each with its upcasters.
REGISTRY.check_complete()

"""What the events share: the registry they register in, names and values with their
constraints, and the parts (line ranges, locations, ground truth, ...) events are made of."""

from __future__ import annotations

from typing import Annotated

import pydantic

from props.core.domain.vocabulary import Severity
from props.core.log.events import EventRegistry

REGISTRY = EventRegistry()

Sha256 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Md5 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200)]
# A launcher's name (`props serve --launcher-name`): part of its stream's name and its lock's.
LauncherName = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
SnapshotSlug = Annotated[
    str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*/\d{4}-\d{2}-\d{2}-\d{2}$")
]
NonNegative = Annotated[float, pydantic.Field(ge=0)]
Count = Annotated[int, pydantic.Field(ge=0)]
Digest = Annotated[str, pydantic.StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]



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

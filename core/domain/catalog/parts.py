"""What the events share: the registry they register in, names and values with their
constraints, and the parts (line ranges, locations, ground truth, ...) events are made of."""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic

from props.core.domain import vocabulary
from props.core.domain.vocabulary import Severity
from props.core.log import faults
from props.core.log.events import EventRegistry

REGISTRY = EventRegistry()

Sha256 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Md5 = Annotated[str, pydantic.StringConstraints(pattern=r"^[0-9a-f]{32}$")]
Name = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=200)]
# A launcher's name (`props serve --launcher-name`): part of its stream's name and its lock's.
LauncherName = Annotated[str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")]
# A container runtime's name, as the runtime registry
# (props.reactors.runtimes.runtime_registry) validates it: any registered runtime's, so a third
# party's engine is recorded without a catalog change.
RUNTIME_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
RuntimeName = Annotated[str, pydantic.StringConstraints(pattern=RUNTIME_NAME_PATTERN)]
SnapshotSlug = Annotated[
    str, pydantic.StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]*/\d{4}-\d{2}-\d{2}-\d{2}$")
]
Digest = Annotated[str, pydantic.StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]

# -- the catalog's ranges ----------------------------------------------------------------------
# Every number an event carries has a range, checked where it enters (agent reports, `props
# events append`, the API, import), so no consumer meets a value it cannot fold: a line
# number fits PostgreSQL's integer, and a sum a projection keeps fits its column by
# construction. Per run: at most MAX_RUN_EVENTS events (AgentLimits.max_events), each
# response at most MAX_CALL_TOKENS tokens and MAX_CALL_USD: a run's total tokens <= 1e6 x 1e9
# = 1e15 < 2^53 (TokenTotal, and the bigint `add` columns that sum one run's responses), its
# cost <= 1e6 x 1e6 = 1e12 (UsdTotal). Sums across runs are numeric (PostgreSQL's sum of
# bigint is). Floats are finite.
INT32 = 2**31 - 1
MAX_RUN_EVENTS = vocabulary.MAX_RUN_EVENTS
MAX_RUN_BYTES = vocabulary.MAX_RUN_BYTES  # events and blobs
MAX_CALL_TOKENS = 10**9
MAX_CALL_USD = 1e6
MAX_LIST = 10_000  # items of a list an event carries, unless a field says otherwise
LineNumber = Annotated[int, pydantic.Field(ge=1, le=INT32)]
Count = Annotated[int, pydantic.Field(ge=0, le=INT32)]
Version = Annotated[int, pydantic.Field(ge=1, le=INT32)]
ExitCode = Annotated[int, pydantic.Field(ge=-(2**31), le=INT32)]
Tokens = Annotated[int, pydantic.Field(ge=0, le=MAX_CALL_TOKENS)]
TokenTotal = Annotated[int, pydantic.Field(ge=0, le=MAX_RUN_EVENTS * MAX_CALL_TOKENS)]
Usd = Annotated[float, pydantic.Field(ge=0, le=MAX_CALL_USD, allow_inf_nan=False)]
UsdTotal = Annotated[float, pydantic.Field(ge=0, le=MAX_RUN_EVENTS * MAX_CALL_USD,
                                           allow_inf_nan=False)]
Seconds = Annotated[float, pydantic.Field(ge=0, le=10**7, allow_inf_nan=False)]  # 115 days
Milliseconds = Annotated[float, pydantic.Field(ge=0, le=10**10, allow_inf_nan=False)]
FilePath = Annotated[str, pydantic.StringConstraints(min_length=1, max_length=1000)]
# A run's caps (props.core.domain.caps): events and bytes its agent may report.
EventCap = Annotated[int, pydantic.Field(ge=1, le=MAX_RUN_EVENTS)]
ByteCap = Annotated[int, pydantic.Field(ge=1, le=MAX_RUN_BYTES)]
# (kept for the names callers import: a non-negative finite float, a count)
NonNegative = Annotated[float, pydantic.Field(ge=0, le=1e15, allow_inf_nan=False)]



class _Part(pydantic.BaseModel):
    """A value nested inside an event: same strictness as events."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class LineRange(_Part):
    start: LineNumber
    end: LineNumber

    @pydantic.model_validator(mode="after")
    def _ordered(self) -> LineRange:
        if self.end < self.start:
            raise ValueError(f"line range ends ({self.end}) before it starts ({self.start})")
        return self


class Location(_Part):
    file: FilePath
    ranges: list[LineRange] = pydantic.Field(default_factory=list, max_length=1000)


class Example(_Part):
    """What a critic reviews: a whole snapshot (files_hash None) or one of its file sets."""

    snapshot: SnapshotSlug
    files_hash: Md5 | None = None


class FileEntry(_Part):
    path: FilePath
    sha256: Sha256
    size: Count


class CapReached(_Part):
    """Which cap of a run its agent reached (an `event_cap` failure), the cap in force and
    the ceiling the operator set for the definition: what a plan may raise it to."""

    cap: Literal["max_events", "max_bytes"]
    limit: Annotated[int, pydantic.Field(ge=0, le=MAX_RUN_BYTES)]
    ceiling: Annotated[int, pydantic.Field(ge=0, le=MAX_RUN_BYTES)]


class Failure(_Part):
    """Closed facts about a failure: never free text that could carry a secret. `retryable`
    is what the retry rule (props.core.log.faults) said of it when it was recorded: made by
    `Failure.of`, never set by hand (tests/test_retry_rule.py looks)."""

    phase: Name
    category: Name
    retryable: bool
    exit_code: ExitCode | None = None
    cap: CapReached | None = None  # an event_cap's: which cap, and where it stood

    @classmethod
    def of(cls, phase: str, category: str, exit_code: int | None = None, *,
           http_status: int | None = None, cap: CapReached | None = None) -> Failure:
        """The failure's facts, retryable as the rule decides (`http_status`: a model
        server's answer, which decides llm_http_error and is not kept)."""
        verdict = faults.decide(category, phase, http_status=http_status)
        return cls(phase=phase, category=category, retryable=verdict.retryable,
                   exit_code=exit_code, cap=cap)

    def verdict(self) -> faults.Verdict:
        """The rule's answer for this failure now (an llm_http_error, whose status is not
        kept, by what the rule said when it was recorded)."""
        return faults.decide(self.category, self.phase, recorded=self.retryable)


MAX_RATIONALE = 20_000  # characters of a TP's or decoy's rationale


class Occurrence(_Part):
    """Where one occurrence of a defect (or decoy) lies: one or more files, as line ranges."""

    locations: list[Location] = pydantic.Field(min_length=1, max_length=100)

    @property
    def files(self) -> set[str]:
        return {loc.file for loc in self.locations}


class TruePositive(_Part):
    id: Name
    rationale: Annotated[str, pydantic.StringConstraints(max_length=MAX_RATIONALE)]
    severity: Severity | None = None
    occurrences: list[Occurrence] = pydantic.Field(min_length=1, max_length=1000)


class FalsePositive(_Part):
    """A known non-defect that looks like one (a decoy): reporting it is a known-false finding."""

    id: Name
    rationale: Annotated[str, pydantic.StringConstraints(max_length=MAX_RATIONALE)]
    relevant_files: list[FilePath] = pydantic.Field(max_length=MAX_LIST)
    occurrences: list[Occurrence] = pydantic.Field(min_length=1, max_length=1000)


class FileSet(_Part):
    name: Name
    files: list[FilePath] = pydantic.Field(min_length=1, max_length=100_000)  # sorted
    files_hash: Md5  # md5 of the sorted member paths, one per line


class Scope(_Part):
    """The TP occurrences ("<tp id>#<n>", n from 1) a critic reviewing an example can be
    expected to find: recall's denominator. `files_hash` None: the whole snapshot."""

    files_hash: Md5 | None
    occurrences: list[Annotated[str, pydantic.StringConstraints(max_length=300)]] = \
        pydantic.Field(max_length=100_000)


class GroundTruth(_Part):
    true_positives: list[TruePositive] = pydantic.Field(max_length=MAX_LIST)
    false_positives: list[FalsePositive] = pydantic.Field(max_length=MAX_LIST)
    file_sets: list[FileSet] = pydantic.Field(max_length=MAX_LIST)
    scopes: list[Scope] = pydantic.Field(max_length=MAX_LIST + 1)


class ScorerRef(_Part):
    name: Name
    version: Version
    code_hash: Sha256
    ground_truth_hash: Sha256

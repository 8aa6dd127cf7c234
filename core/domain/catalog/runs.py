"""A critic's or grader's run, from request to finish (stream run-<uuid>)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import pydantic

from props.core.domain.catalog.parts import (
    REGISTRY,
    ByteCap,
    Count,
    Digest,
    EventCap,
    Example,
    ExitCode,
    Failure,
    LauncherName,
    Location,
    Milliseconds,
    Name,
    RuntimeName,
    Seconds,
    Sha256,
    Tokens,
    TokenTotal,
    Usd,
    UsdTotal,
)
from props.core.domain.vocabulary import AgentType, Severity, TerminalStatus
from props.core.log.events import Event

# -- critic and grader runs (stream run-<uuid>) ------------------------------------------------


@REGISTRY.register
class RunRequested(Event):
    type_name = "run.requested"
    schema_version = 2
    run_id: uuid.UUID
    agent_type: AgentType
    definition: Name
    definition_ref: Name = "latest"  # "latest" or a digest; RunStarted records what was used
    example: Example
    model: Name
    timeout_seconds: float = pydantic.Field(gt=0, le=7 * 86_400, allow_inf_nan=False)
    budget_usd: UsdTotal
    requested_by: Name | None = None
    # The requester's caps for this run (a plan's [[critic]] `max_events`, `max_bytes`):
    # within the ceiling the operator granted the definition (props.core.domain.caps);
    # None: the operator's cap.
    max_events: EventCap | None = None
    max_bytes: ByteCap | None = None


@REGISTRY.upcaster("run.requested", 1)
def _requested_v1(data: dict[str, Any]) -> dict[str, Any]:
    return data  # v2 only added the requester's caps, with defaults


@REGISTRY.register
class RunStarted(Event):
    type_name = "run.started"
    run_id: uuid.UUID
    digest: Digest


@REGISTRY.register
class ContainerStarted(Event):
    type_name = "container.started"
    run_id: uuid.UUID
    runtime: RuntimeName
    container_name: Name
    container_id: Name


@REGISTRY.register
class ContainerExited(Event):
    type_name = "container.exited"
    run_id: uuid.UUID
    exit_code: ExitCode | None  # None: killed before it reported one
    oom_killed: bool = False
    killed_for: Literal["timeout", "budget", "cancel"] | None = None
    logs_sha256: Sha256 | None = None
    duration_seconds: Seconds


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
    message_sha256s: list[Sha256] = pydantic.Field(max_length=100_000)


FinishReason = Annotated[str, pydantic.StringConstraints(max_length=40)]
HttpStatus = Annotated[int, pydantic.Field(ge=100, le=599)]
# json_schema: OpenAI's response_format; json_object: llama.cpp's (json_object + schema);
# tolerant: neither was taken, the answer's JSON was looked for in free text; tools: tool calls.
StructuredOutput = Literal["json_schema", "json_object", "tolerant", "tools", "none"]
# How a model call ended. Each but "answered" ends the run as a failure of that category
# (llm_<outcome>): the answer cannot be read as asked, or there is none.
# over_budget: the model gateway refused the call, the run's budget spent.
CallOutcome = Literal["answered", "unreadable", "truncated", "refused", "overflow",
                      "http_error", "unreachable", "reset", "timeout", "malformed_body",
                      "over_budget"]


@REGISTRY.register
class LlmResponded(Event):
    type_name = "llm.responded"
    run_id: uuid.UUID
    request_id: Name
    response_sha256: Sha256
    tokens_in: Tokens
    tokens_out: Tokens
    cost_usd: Usd
    latency_ms: Milliseconds
    # What the server said of the answer (absent from events recorded before they existed):
    # why it stopped ("stop", "length", "tool_calls", ...), the prompt tokens its cache
    # served, how the output was constrained, how many tool calls it made.
    finish_reason: FinishReason | None = None
    cached_tokens: Tokens | None = None
    structured: StructuredOutput | None = None
    tool_calls: Count | None = None
    # A call that gave no usable answer: a closed fact (the answer, if any, is the blob).
    outcome: CallOutcome = "answered"
    http_status: HttpStatus | None = None


@REGISTRY.register
class PhaseCompleted(Event):
    type_name = "phase.completed"
    run_id: uuid.UUID
    phase: Name
    duration_seconds: Seconds


@REGISTRY.register
class IssueReported(Event):
    type_name = "issue.reported"
    run_id: uuid.UUID
    issue_id: Name
    rationale: Annotated[str, pydantic.StringConstraints(max_length=20_000)]
    locations: list[Location] = pydantic.Field(min_length=1, max_length=100)
    severity: Severity | None = None


@REGISTRY.register
class RunClaimed(Event):
    """A launcher takes a run. Several launchers share the queue: each claims a run only
    with a free slot, at the stream's version as it read it (compare-and-set), so the first
    claim wins; only the launcher of the last claim acts on the run. `takes_over`: the
    launcher whose lease ran out (it died holding the run)."""

    type_name = "run.claimed"
    run_id: uuid.UUID
    launcher: LauncherName
    takes_over: LauncherName | None = None


@REGISTRY.register
class RunReleased(Event):
    """A launcher gives back a run it claimed and never started (its engine does not
    answer), so that another launcher may claim it: a launcher holds no run it cannot
    carry out. Appended at the stream's version as read, like a claim."""

    type_name = "run.released"
    run_id: uuid.UUID
    launcher: LauncherName
    reason: Literal["engine_unreachable"] = "engine_unreachable"


@REGISTRY.register
class RunCancelRequested(Event):
    type_name = "run.cancel_requested"
    run_id: uuid.UUID
    requested_by: Name | None = None


@REGISTRY.register
class RunFinished(Event):
    type_name = "run.finished"
    schema_version = 2
    run_id: uuid.UUID
    status: TerminalStatus
    failure: Failure | None = None
    tokens_in: TokenTotal = 0
    tokens_out: TokenTotal = 0
    cost_usd: UsdTotal = 0.0

    @pydantic.model_validator(mode="after")
    def _failure_matches_status(self) -> RunFinished:
        if self.status == "completed" and self.failure is not None:
            raise ValueError("a completed run carries no failure")
        if self.status == "failed" and self.failure is None:
            raise ValueError("a failed run must say how it failed (failure)")
        return self


@REGISTRY.upcaster("run.finished", 1)
def _finished_v1(data: dict[str, Any]) -> dict[str, Any]:
    return data  # v2 only added the cap an event_cap failure reached, with a default

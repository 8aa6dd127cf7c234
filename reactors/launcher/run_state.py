"""What the log says about one run, folded before the launcher acts on it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime

from props.core.domain import catalog
from props.core.log.events import RecordedEvent
from props.reactors.launcher import agent_roles, grader_runs

_NAMESPACE = uuid.UUID("e3a1c7d2-64b5-4f0a-8a43-0c3e2b9d7f11")


def lifecycle_id(run_id: uuid.UUID, what: str) -> uuid.UUID:
    """The id of the launcher's `what` event of a run: the same in every attempt, so each is
    appended once however often the launcher is killed and restarted."""
    return uuid.uuid5(_NAMESPACE, f"{run_id}:{what}")


@dataclasses.dataclass
class RunState:
    """What the log says about one run, read before the launcher acts on it."""

    requested: catalog.RunRequested
    requested_at: datetime
    started: catalog.RunStarted | None = None
    started_at: datetime | None = None
    container_started: bool = False
    container_exited: catalog.ContainerExited | None = None
    finished: bool = False
    cancel_requested: bool = False
    claim: str | None = None  # the launcher of the last run.claimed
    version: int = 0  # the stream's, as read: a claim is appended at it (compare-and-set)
    stored: set[uuid.UUID] = dataclasses.field(default_factory=set)
    totals: agent_roles.Drained = dataclasses.field(default_factory=agent_roles.Drained)
    grading: grader_runs.GradingTask | None = None  # a grader run's task


def fold_run(records: list[RecordedEvent]) -> RunState | None:
    state: RunState | None = None
    for rec in records:
        e = rec.event
        if isinstance(e, catalog.RunRequested):
            state = RunState(e, rec.recorded_at)
        if state is None:
            continue
        state.stored.add(rec.event_id)
        state.version = rec.stream_version
        if isinstance(e, catalog.RunClaimed):
            state.claim = e.launcher
        elif isinstance(e, catalog.RunReleased) and state.claim == e.launcher:
            state.claim = None
        elif isinstance(e, catalog.RunStarted):
            state.started, state.started_at = e, rec.recorded_at
        elif isinstance(e, catalog.ContainerStarted):
            state.container_started = True
        elif isinstance(e, catalog.ContainerExited):
            state.container_exited = e
        elif isinstance(e, catalog.RunFinished):
            state.finished = True
        elif isinstance(e, catalog.RunCancelRequested):
            state.cancel_requested = True
        elif isinstance(e, catalog.LlmResponded):
            state.totals.add_usage(e)
    return state


# What a model call can fail with that a later attempt may not (the server back, its load over).
_TRANSIENT_CALLS = frozenset({"unreachable", "reset", "timeout"})


def verdict(state: RunState, exited: catalog.ContainerExited, req: catalog.RunRequested,
            capped: bool) -> tuple[catalog.TerminalStatus, catalog.Failure | None]:
    """The run's status from closed facts only (never from the agent's words)."""
    code = exited.exit_code
    if exited.killed_for == "cancel":
        return "cancelled", None
    # A limit that ended the run is a closed fact too: what the status says, with the
    # container's exit (the logs stay in container.exited either way).
    if exited.killed_for == "timeout":
        return "timed_out", catalog.Failure(phase="run", category="timeout", retryable=True,
                                            exit_code=code)
    if exited.killed_for == "budget" or state.totals.cost_usd > req.budget_usd:
        return "budget_exceeded", catalog.Failure(phase="run", category="budget",
                                                  retryable=False, exit_code=code)
    if capped:
        return "failed", catalog.Failure(phase="report", category="event_cap",
                                         retryable=False, exit_code=code)
    if state.totals.malformed:
        return "failed", catalog.Failure(phase="report", category="malformed_event",
                                         retryable=False, exit_code=code)
    if exited.oom_killed:
        return "failed", catalog.Failure(phase="run", category="out_of_memory",
                                         retryable=False, exit_code=code)
    if code == 0:
        return "completed", None
    if code is None:
        return "failed", catalog.Failure(phase="run", category="killed", retryable=True)
    if state.totals.call_failed is not None:
        # A model call that gave no usable answer ended the run: broken, never a scored 0.
        failed = state.totals.call_failed
        status = failed.http_status or 0
        transient = failed.outcome in _TRANSIENT_CALLS or (
            failed.outcome == "http_error" and (status == 429 or status >= 500))
        return "failed", catalog.Failure(phase="llm", category=f"llm_{failed.outcome}",
                                         retryable=transient, exit_code=code)
    return "failed", catalog.Failure(phase="run", category="exit_nonzero",
                                     retryable=False, exit_code=code)

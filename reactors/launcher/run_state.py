"""What the log says about one run, folded before the launcher acts on it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime

from props.core.domain import caps, catalog
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
    caps: caps.Caps = dataclasses.field(default_factory=caps.Caps)  # as launched (the grant's)


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


def verdict(state: RunState, exited: catalog.ContainerExited, req: catalog.RunRequested,
            capped: catalog.CapReached | None,
            ) -> tuple[catalog.TerminalStatus, catalog.Failure | None]:
    """The run's status from closed facts only (never from the agent's words); whether a
    failure is retryable is the retry rule's (`Failure.of`). `capped`: the cap the agent
    reached, if it reached one."""
    code = exited.exit_code
    if exited.killed_for == "cancel":
        return "cancelled", None
    # A limit that ended the run is a closed fact too: what the status says, with the
    # container's exit (the logs stay in container.exited either way).
    if exited.killed_for == "timeout":
        return "timed_out", catalog.Failure.of("run", "timeout", code)
    if exited.killed_for == "budget" or state.totals.cost_usd > req.budget_usd:
        return "budget_exceeded", catalog.Failure.of("run", "budget", code)
    if capped is not None:
        return "failed", catalog.Failure.of("report", "event_cap", code, cap=capped)
    if state.totals.malformed:
        return "failed", catalog.Failure.of("report", "malformed_event", code)
    if exited.oom_killed:
        return "failed", catalog.Failure.of("run", "out_of_memory", code)
    if code == 0:
        return "completed", None
    if code is None:
        return "failed", catalog.Failure.of("run", "killed")
    if state.totals.call_failed is not None:
        # A model call that gave no usable answer ended the run: broken, never a scored 0.
        failed = state.totals.call_failed
        return "failed", catalog.Failure.of("llm", f"llm_{failed.outcome}", code,
                                            http_status=failed.http_status)
    return "failed", catalog.Failure.of("run", "exit_nonzero", code)

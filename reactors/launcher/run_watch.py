"""Watching a run's container until it ends: the agent's reports drained as they come, and
the container killed when the run is cancelled, over its budget or time, or when the agent
reports something malformed or passes its caps.

The deadline counts from `run.started` as recorded, so a restarted launcher that adopts the
container does not extend it. Drains back off while the agent reports nothing (an LLM-bound
critic waits on its model most of the time: the polls of many waiting runs cost the host
more than the runs).
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Literal

from props.core.log.store import EventStore
from props.reactors.launcher import agent_roles
from props.reactors.launcher.run_specs import container_name
from props.reactors.launcher.run_state import RunState
from props.reactors.runtimes.container_runtime import ContainerRuntime, Outcome

log = logging.getLogger("props.reactors.launcher")

WATCH_INTERVAL = 0.25  # how often a running container's reports are drained
IDLE_WATCH_INTERVAL = 1.0  # ... backing off to this while the agent reports nothing

KillReason = Literal["timeout", "budget", "cancel"]


async def watch(store: EventStore, rt: ContainerRuntime, state: RunState,
                cancelled: set[uuid.UUID], deployment: str,
                ) -> tuple[Outcome, KillReason | None]:
    """Until the container ends: its outcome, and why it was killed (None: it ended)."""
    req = state.requested
    name = container_name(deployment, req.run_id)
    began = state.started_at or state.requested_at
    deadline = time.monotonic() + req.timeout_seconds - \
        (datetime.now(UTC) - began).total_seconds()
    killed_for: KillReason | None = None
    stopped = False  # killed: wait for its end
    interval = WATCH_INTERVAL
    while True:
        outcome = await rt.wait(name, max(0.0, min(interval, deadline - time.monotonic())))
        seen = state.totals.last_seq
        await agent_roles.drain(store, req.run_id, state.stored, state.totals, state.grading)
        interval = WATCH_INTERVAL if state.totals.last_seq != seen \
            else min(IDLE_WATCH_INTERVAL, 2 * interval)
        if outcome is not None:
            return outcome, killed_for
        if stopped:
            continue
        stopped, killed_for = await _reason_to_stop(store, state, cancelled, deadline)
        if stopped:
            await rt.kill(name)


async def _reason_to_stop(store: EventStore, state: RunState, cancelled: set[uuid.UUID],
                          deadline: float) -> tuple[bool, KillReason | None]:
    """Whether the container must stop now, and the reason recorded for it (None for
    malformed reports or a cap passed: the verdict reads those from the run's state)."""
    req = state.requested
    if req.run_id in cancelled:
        return True, "cancel"
    if state.totals.cost_usd > req.budget_usd:
        return True, "budget"
    if time.monotonic() >= deadline:
        return True, "timeout"
    binding = await agent_roles.binding(store, req.run_id)
    if state.totals.malformed or (binding is not None and binding.over_cap):
        # The reason stays in the service's log, never in an event (it quotes the agent's
        # input).
        log.warning("run %s: stopping the agent: %s", req.run_id,
                    state.totals.malformed or "over its cap on events or bytes")
        return True, None
    return False, None

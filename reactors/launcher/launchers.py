"""Several launchers at once, each named and bound to its own engine and capacity, sharing the
queue of requested runs through the log.

Each launcher is a reactor of its own (`launcher-<name>`; the unnamed one is `launcher`, as
before), so it follows the log with its own checkpoint and is active in one process at a
time. A run is taken with a `run.claimed` event appended at the run stream's version as read
(compare-and-set: of two launchers claiming at once, one wins) and only with a free slot, so
a launcher's capacity holds. A launcher records its capacity, runtimes, engine and lease as
`launcher.started` at every start. Its lease is its lock: when no session has held it for
`lease_seconds`, the launcher is dead and others take over its unfinished runs (a container on
an engine they share is adopted; one on an engine they cannot reach is given up, the run
failed with the closed fact `launcher_lost`).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
import uuid
from datetime import datetime

import orjson

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.reactors import host
from props.reactors.launcher.run_state import RunState, fold_run, lifecycle_id
from props.schema import queries

log = logging.getLogger(__name__)
DEFAULT_NAME = "launcher"
LEASE_SECONDS = 30.0


def reactor_name(launcher: str) -> str:
    """The reactor (its lock, checkpoint and parked events) of launcher `launcher`."""
    return DEFAULT_NAME if launcher == DEFAULT_NAME else f"launcher-{launcher}"


async def announce(store: EventStore, started: catalog.LauncherStarted) -> None:
    """Record the launcher's settings, unless they are the ones it last recorded: a restart
    with the same capacity, engine and lease appends nothing (`props demo` run twice
    appends nothing)."""
    recorded = await store.read_stream(streams.launcher(started.name))
    if recorded and recorded[-1].event == started:
        return
    await store.append(streams.launcher(started.name), [started])


@dataclasses.dataclass(frozen=True)
class LauncherState:
    name: str
    capacity: int
    runtimes: list[str]
    engine: str | None
    lease_seconds: float
    started_at: datetime  # when these settings were recorded (a restart with the same: none)
    alive: bool  # some process holds its lock now
    load: int  # runs it holds a claim on, not finished


@dataclasses.dataclass(frozen=True)
class _Started:
    data: str
    recorded_at: datetime


@dataclasses.dataclass(frozen=True)
class _Claim:
    stream_id: str
    launcher: str


_STARTED = queries.typed("launchers", "started", _Started)
_HELD = queries.typed("launchers", "held", _Claim)


async def _known(store: EventStore) -> dict[str, tuple[catalog.LauncherStarted, datetime]]:
    found = {}
    for row in await store.sql.rows(_STARTED):
        started = catalog.LauncherStarted.model_validate(orjson.loads(row.data))
        found[started.name] = (started, row.recorded_at)
    return found


async def held(store: EventStore) -> list[tuple[str, uuid.UUID]]:
    """(launcher, run) of every unfinished run, by its last claim."""
    return [(c.launcher, streams.run_id_of(c.stream_id))
            for c in await store.sql.rows(_HELD)]


async def status(store: EventStore) -> list[LauncherState]:
    """Every launcher that ever started: its capacity, engine, lease, whether it is alive
    and how many unfinished runs it holds."""
    loads = collections.Counter(launcher for launcher, _ in await held(store))
    return [LauncherState(name, s.capacity, list(s.runtimes), s.engine, s.lease_seconds, at,
                          await host.serving(store, reactor_name(name)), loads.get(name, 0))
            for name, (s, at) in sorted((await _known(store)).items())]


async def claim(store: EventStore, state: RunState, me: str, taking_over: str | None,
                ) -> RunState | None:
    """The run's state once launcher `me` holds its last claim; None when another live
    launcher holds it (or it finished). Claims are compare-and-set on the run's stream: of
    two launchers claiming at once, the second re-reads and finds the first's. `taking_over`:
    the launcher whose lease ran out, whose claim may be replaced."""
    run_id = state.requested.run_id
    while state.claim != me:
        previous = state.claim
        if previous is not None and taking_over != previous:
            return None
        event_id = lifecycle_id(run_id, f"claimed:{me}:at:{state.version}")
        try:
            await store.append(streams.run(run_id), [NewEvent(
                catalog.RunClaimed(run_id=run_id, launcher=me, takes_over=previous),
                event_id, {"actor": f"launcher:{me}"})], expected_version=state.version)
        except errors.ConcurrencyConflict:
            found = fold_run(await store.read_stream(streams.run(run_id)))
            if found is None or found.finished:
                return None
            state = found
            continue
        if previous is not None:
            log.warning("run %s taken over from launcher %s", run_id, previous)
        state.claim, state.version = me, state.version + 1
        state.stored.add(event_id)
    return state


async def release(store: EventStore, run_id: uuid.UUID, me: str) -> bool:
    """Give back run `run_id` if launcher `me` holds its claim and never started its
    container (`run.released`, compare-and-set like a claim): another launcher may claim it.
    A run whose container started stays claimed: its container lives on this launcher's
    engine, and a second one must never start elsewhere. Whether it was released."""
    state = fold_run(await store.read_stream(streams.run(run_id)))
    if state is None or state.finished or state.claim != me or state.container_started:
        return False
    try:
        await store.append(streams.run(run_id), [NewEvent(
            catalog.RunReleased(run_id=run_id, launcher=me),
            lifecycle_id(run_id, f"released:{me}:at:{state.version}"),
            {"actor": f"launcher:{me}"})], expected_version=state.version)
    except errors.ConcurrencyConflict:
        return False  # the run moved meanwhile (cancelled, finished): the next attempt sees it
    log.warning("run %s released by launcher %s: its engine does not answer", run_id, me)
    return True


class Leases:
    """Which other launchers' leases have run out: launchers whose lock no session has held
    for `lease_seconds` (as seen by this one), with the unfinished runs they hold."""

    def __init__(self, store: EventStore, me: str, lease_seconds: float) -> None:
        self.store = store
        self.me = me
        self.lease_seconds = lease_seconds
        self.dead_since: dict[str, float] = {}
        self.settled: set[str] = set()  # dead, and nothing left: until it is seen alive

    async def expired(self) -> dict[str, list[uuid.UUID]]:
        now = time.monotonic()
        gone = []
        for name in await _known(self.store):
            if name == self.me:
                continue
            if await host.serving(self.store, reactor_name(name)):
                self.dead_since.pop(name, None)
                self.settled.discard(name)
                continue
            if name in self.settled:
                continue
            if now - self.dead_since.setdefault(name, now) >= self.lease_seconds:
                gone.append(name)
        if not gone:
            return {}
        found: dict[str, list[uuid.UUID]] = {}
        for launcher, run in await held(self.store):  # one read, whoever is gone
            if launcher in gone:
                found.setdefault(launcher, []).append(run)
        self.settled.update(name for name in gone if name not in found)
        return found

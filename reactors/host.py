"""What every reactor shares: one active instance, a durable checkpoint, retries, parking.

A reactor handles the events of the types it names, one at a time, in log order. The host
that runs it:
- takes the reactor's advisory lock on a dedicated connection, so of two replicas one serves
  and the other waits to take over (the lock dies with its session: a crashed replica frees it);
- follows the log from the reactor's checkpoint and moves the checkpoint (compare-and-set)
  after each batch is handled: delivery is at least once, and handlers make their effects
  idempotent (deterministic event ids, containers named by run id);
- retries a handler that fails for a transient reason (the database or the engine went away)
  with exponential backoff, for as long as it takes: such an event is never parked;
- parks an event whose handler fails otherwise, after a few attempts: an `event.parked` event
  in stream `reactor-<name>` keeps the reactor, the event and the error, and the reactor goes on;
- stops gracefully when cancelled: it finishes the event in hand, records it and returns;
  work a reactor runs in the background (containers) is handed back to the log and adopted
  on restart.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Protocol

import aiodocker
import anyio
import anyio.abc
import anyio.lowlevel

from props.core.domain import parking
from props.core.domain.vocabulary import REACTORS
from props.core.log import database, errors, leadership, retries
from props.core.log.checkpoints import START, Checkpoint
from props.core.log.events import RecordedEvent, UnreadableEvent
from props.core.log.store import EventStore
from props.projections import status as projection_status
from props.reactors.stopping import Stop
from props.schema import queries

log = logging.getLogger(__name__)

TRANSIENT: tuple[type[BaseException], ...] = (*database.UNAVAILABLE, aiodocker.DockerError)


class Reactor(Protocol):
    name: str
    types: tuple[str, ...]  # the event types it handles

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Called once the reactor is the active instance, before it follows the log:
        resume work in flight, start background tasks in `tg`."""

    async def handle(self, rec: RecordedEvent) -> None:
        """Act on one event. Must be idempotent: after a crash it may see the event again."""


def checkpoint_name(reactor: str) -> str:
    return f"reactor:{reactor}"


_SERVING = queries.load("agents")["reactor_serving"]


@dataclasses.dataclass(frozen=True)
class ReactorState:
    name: str
    checkpoint: Checkpoint | None
    lag_events: int
    lag_seconds: float | None
    parked: int


async def status(store: EventStore, also: Sequence[str] = ()) -> list[ReactorState]:
    """Where each reactor (and those named in `also`) stands: checkpoint, lag behind the
    log, events it gave up on."""
    states = []
    for name in [*REACTORS, *(n for n in also if n not in REACTORS)]:
        cp = await store.find_checkpoint(checkpoint_name(name))
        behind = await projection_status.lag(store, cp or START)
        states.append(ReactorState(name, cp, behind.events, behind.seconds,
                                   await parking.count(store, name)))
    return states


async def serving(store: EventStore, reactor: str) -> bool:
    """Whether a process serves `reactor` now (it holds the reactor's lock)."""
    return bool(await store.sql.fetchval(_SERVING, leadership.reactor(reactor)))


@dataclasses.dataclass
class HostStats:
    handled: int = 0
    parked: int = 0
    retries: int = 0


class ReactorHost:
    """Serves one reactor until cancelled: `await ReactorHost(store, reactor).run()`."""

    def __init__(self, store: EventStore, reactor: Reactor, *, poll_interval: float = 1.0,
                 batch_size: int = 200, stop: Stop | None = None) -> None:
        self.store = store
        self.stop = stop or Stop()
        self.reactor = reactor
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.stats = HostStats()
        self.active = anyio.Event()  # set once this instance holds the lock
        self.standing = leadership.Standing()  # whether it leads or stands by

    async def run(self) -> None:
        """Serve until cancelled, surviving database restarts. A lost lock session, or the
        checkpoint moved by an instance that took the lock meanwhile, means: stand down and
        queue for the lock again."""
        await retries.keep_serving(self._serve, f"reactor {self.reactor.name}",
                                    (*TRANSIENT, errors.CheckpointConflict))

    async def _serve(self) -> None:
        name = self.reactor.name
        async with leadership.lead(self.store.dsn, leadership.reactor(name), f"reactor {name}",
                                   standing=self.standing):
            self.active.set()
            try:
                async with anyio.create_task_group() as tg:
                    await self.reactor.start(tg)
                    await self._follow()
                    tg.cancel_scope.cancel()
            finally:
                self.active = anyio.Event()

    async def _follow(self) -> None:
        wanted = set(self.reactor.types)
        name = checkpoint_name(self.reactor.name)
        position = await self.store.load_checkpoint(name)
        async with self.store.subscribe(position, batch_size=self.batch_size,
                                        poll_interval=self.poll_interval) as sub:
            async for batch in sub:
                done: RecordedEvent | None = None  # the last event handled
                try:
                    for rec in batch:
                        if rec.type_name not in wanted:
                            done = rec
                            continue
                        # Shielded: a stop lets the event in hand finish, never
                        # half-handled; at the stop's deadline it is left, not recorded as
                        # done (it comes again).
                        with self.stop.shielded(f"reactor {self.reactor.name}: event "
                                                f"{rec.global_position} ({rec.type_name})"
                                                ) as held:
                            await self._handle(rec)
                        if held.abandoned:
                            await anyio.lowlevel.checkpoint()  # (the stop, raised here)
                        done = rec
                        await anyio.lowlevel.checkpoint_if_cancelled()  # a stop: here
                except anyio.get_cancelled_exc_class():
                    if done is not None:  # record where the stop found it
                        with self.stop.shielded(f"reactor {self.reactor.name}: its "
                                                f"checkpoint at {done.global_position}"):
                            await self._save_on_stop(name, position, done)
                    raise
                assert done is not None
                with self.stop.shielded(f"reactor {self.reactor.name}: its checkpoint at "
                                        f"{done.global_position}") as held:
                    position = await self._save(name, position, done)
                if held.abandoned:
                    await anyio.lowlevel.checkpoint()

    async def _save(self, name: str, position: Checkpoint, done: RecordedEvent) -> Checkpoint:
        new = Checkpoint(done.tx_id, done.global_position)
        await self.store.save_checkpoint(name, position, new)
        return new

    async def _save_on_stop(self, name: str, position: Checkpoint, done: RecordedEvent) -> None:
        try:
            await self._save(name, position, done)
        except Exception as exc:  # delivery is at least once: these events come again
            log.warning("reactor %s: stopping without recording event %s (%s)",
                        self.reactor.name, done.global_position, exc)

    async def _handle(self, rec: RecordedEvent) -> None:
        if isinstance(rec.event, UnreadableEvent):  # a defect of the event: no retry helps
            await self._park(rec, errors.InvalidEvent(rec.event.problem), 1)
            return
        try:  # a failure that is not transient is a poison event: parked after a few tries
            await retries.POISON.call(functools.partial(self._handle_through_outages, rec),
                                      lambda exc: not database.only(exc, TRANSIENT))
        except Exception as exc:
            await self._park(rec, exc, retries.POISON.attempts or 1)
            return
        self.stats.handled += 1

    async def _handle_through_outages(self, rec: RecordedEvent) -> None:
        """The handler, again under EVENT while it fails for a transient reason (each
        event's waits start from the shortest: earlier events' retries do not lengthen
        them)."""
        def retried(exc: BaseException, _: int) -> None:
            self.stats.retries += 1
            log.warning("reactor %s: transient failure on event %s (%s); retrying",
                        self.reactor.name, rec.global_position, exc)

        await retries.EVENT.call(functools.partial(self.reactor.handle, rec),
                                 retries.of_kinds(*TRANSIENT), on_retry=retried)

    async def _park(self, rec: RecordedEvent, exc: Exception, attempts: int) -> None:
        log.error("reactor %s parked event %s (%s): %s", self.reactor.name,
                  rec.global_position, rec.type_name, exc)
        await retries.EVENT.call(
            functools.partial(parking.park, self.store, self.reactor.name, rec.event_id,
                              rec.global_position, exc, attempts=attempts),
            retries.of_kinds(*TRANSIENT))
        self.stats.parked += 1


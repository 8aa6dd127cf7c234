"""What every reactor shares: one active instance, a durable checkpoint, retries, parking.

A reactor handles the events of the types it names, one at a time, in log order. The host
runs it on the consumer loop the projection runner shares (props.core.domain.consumer_loop),
which:
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
import logging
from collections.abc import Sequence
from typing import Protocol

import anyio
import anyio.abc

from props.core.domain import consumer_loop, parking
from props.core.domain.vocabulary import REACTORS
from props.core.log import leadership
from props.core.log.checkpoints import START, Checkpoint
from props.core.log.events import RecordedEvent
from props.core.log.stopping import Stop
from props.core.log.store import EventStore
from props.projections import status as projection_status
from props.schema import queries

log = logging.getLogger(__name__)


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


class ReactorHost:
    """Serves one reactor until cancelled: `await ReactorHost(store, reactor).run()`. The
    following, committing, parking and stopping are the shared consumer loop's
    (`consumer_loop.Loop`); the host says how a reactor takes an event and records it."""

    decode = None  # a reactor reads every event it is shown

    def __init__(self, store: EventStore, reactor: Reactor, *, poll_interval: float = 1.0,
                 batch_size: int = 200, stop: Stop | None = None) -> None:
        self.store = store
        self.reactor = reactor
        self.what = f"reactor {reactor.name}"
        self.lock = leadership.reactor(reactor.name)
        self._wanted = frozenset(reactor.types)
        self._checkpoint = checkpoint_name(reactor.name)
        self._position = START
        self.loop = consumer_loop.Loop(store, self, stop=stop, poll_interval=poll_interval,
                                       batch_size=batch_size)
        self.stop = self.loop.stop
        self.stats = self.loop.stats  # events handled, parked, retried
        self.parks_as = reactor.name
        self.standing = self.loop.standing  # whether it leads or stands by

    @property
    def active(self) -> anyio.Event:
        """Set once this instance holds the lock."""
        return self.loop.active

    async def run(self) -> None:
        await self.loop.run()

    async def begin(self, tg: anyio.abc.TaskGroup) -> Checkpoint:
        await self.reactor.start(tg)
        self._position = await self.store.load_checkpoint(self._checkpoint)
        return self._position

    def handler(self, rec: RecordedEvent) -> consumer_loop.Handler | None:
        """The reactor's `handle`, for the event types it lists."""
        return self.reactor.handle if rec.type_name in self._wanted else None

    async def commit(self, batch: Sequence[RecordedEvent], upto: Checkpoint) -> None:
        await self.store.save_checkpoint(self._checkpoint, self._position, upto)
        self._position = upto

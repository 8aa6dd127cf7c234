"""The one loop every consumer of the log runs: the reactors' host and the projection runner.

A consumer (`Consumer`) says what it does with events; the loop does the rest, the same way
for both:
- lead: hold the consumer's advisory lock on a session of its own (of two replicas one
  serves, the other stands by and takes over);
- follow: subscribe from where the consumer resumes, batch after batch;
- take: run the consumer's handler of each event it has one for (`handler`), one at a time,
  shielded by the service's `Stop` (the event in hand finishes, unless the stop's deadline
  cuts it: then it comes again, never recorded as done); a consumer that folds whole batches
  (the projection runner) has a handler for none;
- commit: record the batch (a reactor its checkpoint, the runner its rows and checkpoints
  in one transaction), shielded the same way; on a stop in the middle of a batch, what was
  taken so far;
- park: an event the consumer cannot handle is recorded as parked (`park`, the one way for
  reactors and projections alike) and the rest goes on;
- stop and restart: a cancellation stops it; a transient failure (`faults`) or a checkpoint
  moved by another instance stands it down and queues it for the lock again.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio
import anyio.abc
import anyio.lowlevel

from props.core.domain import parking
from props.core.log import errors, faults, leadership, retries, stopping
from props.core.log.checkpoints import Checkpoint
from props.core.log.events import DecodeFilter, RecordedEvent, UnreadableEvent
from props.core.log.store import EventStore

log = logging.getLogger(__name__)

# One event's handling (idempotent: after a crash it may see the event again). A transient
# failure is retried until it passes; any other is retried a few times, then the event is
# parked and the loop goes on.
Handler = Callable[[RecordedEvent], Awaitable[None]]


class Consumer(Protocol):
    @property
    def what(self) -> str:
        """How logs and the stop's report name it ("reactor grader")."""

    @property
    def lock(self) -> int:
        """Its advisory lock: one active instance."""

    @property
    def decode(self) -> DecodeFilter | None:
        """Which events its subscription decodes (None: all)."""

    async def begin(self, tg: anyio.abc.TaskGroup) -> Checkpoint:
        """Once this instance leads: resume work in flight (background tasks in `tg`) and
        say where to follow the log from."""

    def handler(self, rec: RecordedEvent) -> Handler | None:
        """What handles `rec` on its own, before the batch's commit (None: nothing, it is
        passed over, done; a consumer that folds whole batches answers None to every event)."""

    @property
    def parks_as(self) -> str:
        """The consumer name its parks are recorded under (`reactor-<name>`)."""

    async def commit(self, batch: Sequence[RecordedEvent], upto: Checkpoint) -> None:
        """Record the batch's events up to `upto` (inclusive) as done."""


@dataclasses.dataclass
class LoopStats:
    handled: int = 0
    parked: int = 0
    retries: int = 0


class Loop:
    """Serves one consumer until cancelled: `await Loop(store, consumer, stop=...).run()`."""

    def __init__(self, store: EventStore, consumer: Consumer, *, stop: stopping.Stop | None,
                 poll_interval: float, batch_size: int) -> None:
        self.store = store
        self.consumer = consumer
        self.stop = stop or stopping.current()
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self.active = anyio.Event()  # set once this instance holds the lock
        self.standing = leadership.Standing()  # whether it leads or stands by
        self.stats = LoopStats()

    async def run(self) -> None:
        """Serve until cancelled, surviving database restarts. A lost lock session, or the
        checkpoint moved by an instance that took the lock meanwhile (or by a rebuild),
        means: stand down and queue for the lock again, then resume from the checkpoint."""
        await retries.keep_serving(self._serve, self.consumer.what,
                                   also=(errors.CheckpointConflict,))

    async def _serve(self) -> None:
        async with leadership.lead(self.store.dsn, self.consumer.lock, self.consumer.what,
                                   standing=self.standing):
            self.active.set()
            try:
                async with anyio.create_task_group() as tg:
                    start = await self.consumer.begin(tg)
                    await self._follow(start)
                    tg.cancel_scope.cancel()
            finally:
                self.active = anyio.Event()

    async def _follow(self, start: Checkpoint) -> None:
        async with self.store.subscribe(start, batch_size=self.batch_size,
                                        poll_interval=self.poll_interval,
                                        decode=self.consumer.decode) as sub:
            async for batch in sub:
                done = await self._take_all(batch)
                assert done is not None
                await self._commit(batch, done)

    async def _take_all(self, batch: Sequence[RecordedEvent]) -> RecordedEvent | None:
        """Each event the consumer has a handler for, handled; returns the last one done.
        On a stop, records what was done before it and lets the stop go on."""
        done: RecordedEvent | None = None
        try:
            for rec in batch:
                handler = self.consumer.handler(rec)
                if handler is not None:
                    with self.stop.shielded(f"{self.consumer.what}: event "
                                            f"{rec.global_position} ({rec.type_name})"
                                            ) as held:
                        await self._take(rec, handler)
                    if held.abandoned:
                        await anyio.lowlevel.checkpoint()  # (the stop, raised here)
                done = rec
                if handler is not None:
                    await anyio.lowlevel.checkpoint_if_cancelled()  # a stop: here
        except anyio.get_cancelled_exc_class():
            if done is not None:
                await self._commit_on_stop(batch, done)
            raise
        return done

    async def _take(self, rec: RecordedEvent, handler: Handler) -> None:
        if isinstance(rec.event, UnreadableEvent):  # a defect of the event: no retry helps
            await self._park(rec, errors.InvalidEvent(rec.event.problem), 1)
            return
        try:  # a failure that is not transient is a poison event: parked after a few tries
            await retries.POISON.call(
                functools.partial(self._take_through_outages, rec, handler),
                lambda exc: not faults.transient(exc))
        except Exception as exc:
            await self._park(rec, exc, retries.POISON.attempts or 1)
            return
        self.stats.handled += 1

    async def _take_through_outages(self, rec: RecordedEvent, handler: Handler) -> None:
        """The consumer's handler, again under EVENT while it fails for a transient reason
        (each event's waits start from the shortest: earlier events' retries do not
        lengthen them)."""
        def retried(exc: BaseException, _: int) -> None:
            self.stats.retries += 1
            log.warning("%s: transient failure on event %s (%s); retrying",
                        self.consumer.what, rec.global_position, exc)

        await retries.EVENT.call(functools.partial(handler, rec), faults.transient,
                                 on_retry=retried)

    async def _park(self, rec: RecordedEvent, exc: Exception, attempts: int) -> None:
        await park(self.store, self.consumer.parks_as, rec.event_id, rec.global_position,
                   exc, attempts=attempts, stop=self.stop)
        self.stats.parked += 1

    async def _commit(self, batch: Sequence[RecordedEvent], done: RecordedEvent) -> None:
        with self.stop.shielded(f"{self.consumer.what}: its commit at "
                                f"{done.global_position}") as held:
            await self.consumer.commit(batch, Checkpoint(done.tx_id, done.global_position))
        if held.abandoned:
            await anyio.lowlevel.checkpoint()

    async def _commit_on_stop(self, batch: Sequence[RecordedEvent],
                              done: RecordedEvent) -> None:
        with self.stop.shielded(f"{self.consumer.what}: its commit at "
                                f"{done.global_position}"):
            try:
                await self.consumer.commit(batch, Checkpoint(done.tx_id, done.global_position))
            except Exception as exc:  # delivery is at least once: these events come again
                log.warning("%s: stopping without recording event %s (%s)",
                            self.consumer.what, done.global_position, exc)


async def park(store: EventStore, consumer: str, event_id: uuid.UUID, global_position: int,
               exc: BaseException, *, attempts: int = 1, stop: stopping.Stop | None = None,
               ) -> None:
    """Record that `consumer` skips the event, through the database's outages (a park is
    idempotent), shielded by the stop: the one way every consumer parks."""
    log.error("%s parked the event at position %d (%s: %s); it goes on with the rest",
              consumer, global_position, type(exc).__name__, str(exc)[:500])
    with (stop or stopping.current()).shielded(f"{consumer}: its park of the event at "
                                               f"{global_position}"):
        await retries.EVENT.call(
            functools.partial(parking.park, store, consumer, event_id, global_position, exc,
                              attempts=attempts), faults.transient)

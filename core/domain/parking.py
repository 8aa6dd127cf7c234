"""Events a consumer parked: what it skipped and why, as events of its own stream.

A consumer (a reactor, a projection) that cannot handle an event for a reason no retry mends
records `event.parked` (the event's id and position, the error's class and message) in
`reactor-<consumer>` and goes on with the rest: the record survives restarts and exports, and
status commands count it. `parked.retried` (a person, after an upgrade) takes it up again; if
it still fails it is parked again, under a new id. What is parked now is the newest of the
two for each event.
"""

from __future__ import annotations

import dataclasses
import uuid

from props.core.domain import catalog, streams
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.schema import queries

_NAMESPACE = uuid.UUID("8d7f9a52-1b0c-4c55-9f0e-3f4de0a3a0c1")  # (reactors' since turn 1)
_AGENTS = queries.load("agents")
_PARKED = _AGENTS["parked"]


@dataclasses.dataclass(frozen=True)
class Parked:
    event_id: uuid.UUID
    global_position: int
    error_type: str
    error_message: str
    tries: int  # how many times it was taken up again (parked.retried) before this park


async def count(store: EventStore, consumer: str) -> int:
    """How many events `consumer` skips now, counted on the server (what status shows)."""
    return int(await store.sql.fetchval(_PARKED, streams.reactor(consumer)))


async def count_all(store: EventStore) -> int:
    """How many events some consumer skips now, every consumer's together (`props db
    status`)."""
    return int(await store.sql.fetchval(_AGENTS["parked_now"]))


async def parked(store: EventStore, consumer: str) -> dict[uuid.UUID, Parked]:
    """What `consumer` skips now, by event id."""
    now: dict[uuid.UUID, Parked] = {}
    tries: dict[uuid.UUID, int] = {}
    for rec in await store.read_stream(streams.reactor(consumer)):
        e = rec.event
        if isinstance(e, catalog.EventParked):
            now[e.event_id] = Parked(e.event_id, e.global_position, e.error_type,
                                     e.error_message, tries.get(e.event_id, 0))
        elif isinstance(e, catalog.ParkedRetried):
            now.pop(e.event_id, None)
            tries[e.event_id] = tries.get(e.event_id, 0) + 1
    return now


def parked_id(consumer: str, event_id: uuid.UUID, tries: int = 0) -> uuid.UUID:
    """The park's own id: one per event and consumer, and one more for each retry of it
    (the first keeps the id parks always had)."""
    return uuid.uuid5(_NAMESPACE, f"{consumer}:{event_id}" + (f":{tries}" if tries else ""))


async def park(store: EventStore, consumer: str, event_id: uuid.UUID, global_position: int,
               exc: BaseException, *, attempts: int = 1) -> None:
    """Record that `consumer` skips the event (idempotent: the same park twice is one; a
    park after a retry of it is a new one)."""
    tries = sum(1 for rec in await store.read_stream(streams.reactor(consumer))
                if isinstance(rec.event, catalog.ParkedRetried) and rec.event.event_id == event_id)
    event = catalog.EventParked(
        reactor=consumer, event_id=event_id, global_position=global_position,
        error_type=type(exc).__name__[:200], error_message=str(exc)[:4000],
        attempts=attempts)
    await store.append(streams.reactor(consumer),
                       [NewEvent(event, parked_id(consumer, event_id, tries))])


async def retry_all(store: EventStore, consumer: str, requested_by: str | None = None) -> int:
    """Take every event `consumer` parked up again; returns how many."""
    found = await parked(store, consumer)
    events = [NewEvent(catalog.ParkedRetried(
        reactor=consumer, event_id=p.event_id, global_position=p.global_position,
        requested_by=requested_by), uuid.uuid5(_NAMESPACE, f"retry:{consumer}:{p.event_id}:"
                                                         f"{p.tries}"))
        for p in found.values()]
    if events:
        await store.append(streams.reactor(consumer), events)
    return len(events)

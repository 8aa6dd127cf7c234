"""A projection never stops on one event: it parks the event and folds the rest.

A range's fold (the runner's batch, a rebuild's chunk) that fails for a reason no retry mends
(a value its SQL cannot hold, an event it cannot read) is folded again projection by
projection, in transactions that are rolled back, to find which projection fails and, by
bisection over the range, the first event it fails on. That event is parked for that
projection only (`event.parked` in `reactor-projection.<name>`: it survives restarts and
exports, `props projections status` counts it), its position joins the positions the
projection skips, and the range is folded again. The other projections fold it as usual.
A rebuild skips the same positions, so rebuild and live runner still agree;
`props projections retry-parked` takes them up again after an upgrade (by a rebuild).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence

from props.core.domain import consumer_loop, parking
from props.core.log import database, errors, faults
from props.core.log.checkpoints import Checkpoint
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.projections.base import Projection
from props.projections.folding import Skips, commit_range, fold_settings
from props.schema import queries

log = logging.getLogger(__name__)
_Q = queries.load("projections")


def consumer(p: Projection) -> str:
    """The name a projection parks under (its stream: `reactor-projection.<name>`)."""
    return f"projection.{p.name}"


async def skips(store: EventStore, projections: Sequence[Projection]) -> dict[str, frozenset[int]]:
    """The positions each projection parked and skips now."""
    return {p.name: frozenset(x.global_position
                              for x in (await parking.parked(store, consumer(p))).values())
            for p in projections}


def poisoned(exc: BaseException) -> bool:
    """An error of the range's content, not of the moment: the database answered (neither
    gone nor aborting the transaction for a reason of its own) and no rebuild moved the
    checkpoints meanwhile."""
    return (isinstance(exc, Exception) and not faults.transient(exc)
            and not isinstance(exc, errors.CheckpointConflict))


@dataclasses.dataclass(frozen=True)
class Poison:
    event_id: uuid.UUID
    global_position: int
    error: Exception


@dataclasses.dataclass(frozen=True)
class _Probe:
    """Folds one projection over part of a range, always rolled back: on a connection of its
    own, or (`conn`: a caller inside a transaction that holds the tables' rows, the
    rebuild's swap) in a savepoint of the caller's."""

    store: EventStore
    schema: str
    p: Projection
    events: Sequence[RecordedEvent]
    after: Checkpoint
    skipped: Skips
    derive: bool
    conn: database.Connection | None

    async def error(self, end: Checkpoint) -> Exception | None:
        """The error folding (after, end] raises, None if it folds."""
        if self.conn is not None:
            return await self._on(self.conn, end)
        async with self.store.sql.acquire() as conn:
            return await self._on(conn, end)

    async def _on(self, conn: database.Connection, end: Checkpoint) -> Exception | None:
        tx = conn.transaction()
        await tx.start()
        try:
            await fold_settings(conn)
            await commit_range(conn, self.store, self.schema, [self.p], self.events,
                               {self.p.name: self.after}, end, None, derive=self.derive,
                               skips=self.skipped)
        except Exception as exc:
            if not poisoned(exc):
                raise
            return exc
        finally:
            await tx.rollback()
        return None


async def find_poison(store: EventStore, schema: str, p: Projection,
                      events: Sequence[RecordedEvent], after: Checkpoint, end: Checkpoint,
                      skipped: Skips, derive: bool, conn: database.Connection | None = None,
                      ) -> Poison | None:
    """The first event of (after, end] that `p`'s fold fails on (None: it folds the range
    alone), by bisection: about log2(range) folds of part of the range."""
    probe = _Probe(store, schema, p, events, after, skipped, derive, conn)
    if await probe.error(end) is None:
        return None
    rows = await store.sql.fetch(_Q["range_envelopes"], after.tx_id, after.position,
                                 end.tx_id, end.position)
    lo, hi = 0, len(rows) - 1  # folding up to rows[hi] fails
    failure: Exception | None = None
    while lo < hi:
        mid = (lo + hi) // 2
        error = await probe.error(Checkpoint(rows[mid]["tx_id"], rows[mid]["global_position"]))
        if error is None:
            lo = mid + 1
        else:
            hi, failure = mid, error
    if failure is None:
        failure = await probe.error(Checkpoint(rows[lo]["tx_id"], rows[lo]["global_position"]))
    assert failure is not None
    return Poison(rows[lo]["event_id"], rows[lo]["global_position"], failure)


async def fold_or_park(store: EventStore, schema: str, projections: Sequence[Projection],
                       events: Sequence[RecordedEvent], positions: dict[str, Checkpoint],
                       end: Checkpoint, skipped: dict[str, frozenset[int]],
                       commit: Callable[[], Awaitable[None]], *, derive: bool = True,
                       conn: database.Connection | None = None) -> int:
    """`await commit()` (the caller's fold of the range, in its transaction); each time it
    fails on the range's content, park the event it fails on for the projection that
    cannot fold it, and commit again. Returns how many events were parked. An error no
    projection reproduces alone is raised as it is."""
    parked = 0
    while True:
        try:
            await commit()
            return parked
        except Exception as exc:
            if not poisoned(exc):
                raise
            found = False
            for p in projections:
                if end <= positions[p.name]:
                    continue
                poison = await find_poison(store, schema, p, events, positions[p.name], end,
                                           skipped, derive, conn)
                if poison is None:
                    continue
                await consumer_loop.park(store, consumer(p), poison.event_id,
                                         poison.global_position, poison.error)
                skipped[p.name] = skipped.get(p.name, frozenset()) | {poison.global_position}
                parked += 1
                found = True
            if not found:
                raise

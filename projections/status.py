"""Where each projection stands: its checkpoint, how far it is behind the log, what it
parked; and every live table's rows, to compare two states of the tables."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

import anyio

from props.core.domain import parking as core_parking
from props.core.log.checkpoints import START, Checkpoint
from props.core.log.store import EventStore
from props.projections import parking
from props.projections.base import Projection
from props.projections.engine import ALL
from props.projections.names import LIVE
from props.schema import queries


@dataclasses.dataclass(frozen=True)
class ProjectionStatus:
    name: str
    version: int
    checkpoint: Checkpoint | None
    lag_events: int
    lag_seconds: float | None
    parked: int = 0  # events it could not fold, and skips


@dataclasses.dataclass(frozen=True)
class Lag:
    """How far a consumer at a checkpoint is behind the log: events after it (behind the
    fence or not yet) and the age of the oldest of them."""

    events: int
    seconds: float | None


_LAG = queries.typed("projections", "lag", Lag)


async def lag(store: EventStore, at: Checkpoint) -> Lag:
    found = await store.sql.row(_LAG, at.tx_id, at.position)
    assert found is not None  # an aggregate: one row
    return found


async def of(store: EventStore,
             projections: Sequence[Projection] = ALL) -> list[ProjectionStatus]:
    out = []
    for p in projections:
        cp = await store.find_checkpoint(p.checkpoint_name)
        behind = await lag(store, cp or START)
        out.append(ProjectionStatus(p.name, p.version, cp, behind.events, behind.seconds,
                                    await core_parking.count(store, parking.consumer(p))))
    return out


_Q = queries.load("projections")


async def settled(store: EventStore, run_ids: Sequence[uuid.UUID]) -> bool:
    """Whether every one of these runs is finished and graded, and the projections show it
    (built, caught up with the log, no issue waiting for the scorer)."""
    statuses = await of(store)
    if any(s.checkpoint is None or s.lag_events for s in statuses):
        return False
    row = await store.sql.fetchrow(_Q["settled"], list(run_ids))
    assert row is not None  # aggregates: one row
    return int(row["finished"]) == len(run_ids) and not row["pending"]


async def snapshot_rows(store: EventStore) -> dict[str, list[tuple[object, ...]]]:
    """Every live projection table's rows, sorted: to compare two states of the tables."""
    out: dict[str, list[tuple[object, ...]]] = {}
    for p in ALL:
        for t in p.tables:
            rows = await store.sql.fetch(f"SELECT {', '.join(t.names)} FROM {LIVE}.{t.name}")
            out[t.name] = sorted(tuple(r) for r in rows)
    return out


async def folded(store: EventStore, seconds: float = 120) -> int:
    """Fold what the log holds into the live projections now, so that a command's own
    appends (a re-score) are in the figures the next command reads: a runner here, or the
    service's if one leads. Waits at most `seconds`; returns the events still behind."""
    from props.projections.engine import Runner

    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tg:
            tg.start_soon(Runner(store, poll_interval=0.1).run, name="props-fold-now")
            while any(s.lag_events for s in await of(store)):  # noqa: ASYNC110 (the tables)
                await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
    return sum(s.lag_events for s in await of(store))

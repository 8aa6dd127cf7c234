"""The launcher's slots, handed out in turn: across requesters first, then across each
requester's evaluations, first come first served only within one evaluation.

One FIFO let one requester's 10,000 queued runs keep everyone else's waiting for hours.
Here a freed slot goes to the next requester in the round that has a run waiting (the one
just served goes to the back), and within that requester to its next evaluation (its runs
outside any evaluation are one more); so B's one run waits behind at most one run of each
other requester. A model's `max_connections` is held here as well: a run whose model has
that many in flight on this launcher waits, and the slot goes to the next that may run.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
import uuid
from collections.abc import Callable
from types import TracebackType

import anyio
import anyio.lowlevel

from props.core.domain import catalog, definitions, evaluations, streams
from props.core.log.store import EventStore

EVALUATION = "evaluation"  # a run.requested's metadata: its evaluation, and
REQUESTER = "requester"  # who started that evaluation (a token's name), for the queue
TAG_SECONDS = 5.0  # how long a definition's ceiling read by tag is trusted


@dataclasses.dataclass(frozen=True)
class Ticket:
    """Who a run is for: its requester (a token's name, or whoever started its evaluation),
    its evaluation ("" for none), and its model with the model's own ceiling, if any."""

    requester: str
    evaluation: str = ""
    model: str = ""
    max_connections: int | None = None


@dataclasses.dataclass(eq=False)
class _Waiter:
    ticket: Ticket
    granted: anyio.Event = dataclasses.field(default_factory=anyio.Event)


class Tickets:
    """Each queued run's ticket, from its request; a model's ceiling read from its definition
    (by digest: cached, a digest's config never changes; by tag: for TAG_SECONDS)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._limits: dict[tuple[str, str, str], tuple[int | None, float]] = {}

    async def of(self, run_id: uuid.UUID) -> Ticket:
        records = await self.store.read_stream(streams.run(run_id), limit=1)
        if not records or not isinstance(req := records[0].event, catalog.RunRequested):
            return Ticket("")
        meta = records[0].metadata
        key = (req.agent_type, req.definition, req.definition_ref)
        cached = self._limits.get(key)
        if cached is None or cached[1] < time.monotonic():
            d = await definitions.resolve(self.store, *key)
            ttl = math.inf if req.definition_ref.startswith("sha256:") else TAG_SECONDS
            cached = (evaluations.max_connections(d) if d else None, time.monotonic() + ttl)
            self._limits[key] = cached
        return Ticket(str(meta.get(REQUESTER) or req.requested_by or ""),
                      str(meta.get(EVALUATION) or ""), req.definition, cached[0])


class FairSlots:
    def __init__(self, capacity: int, limit: Callable[[], int] | None = None) -> None:
        self.capacity = capacity
        # What the engines hold just now, read at each grant (a swarm's nodes come and go):
        # the slots in use never pass it, nor `capacity`.
        self.limit = limit
        self.used = 0
        self.per_model: collections.Counter[str] = collections.Counter()
        # requester -> evaluation -> waiters; the dicts' order is the round's order.
        self._waiting: dict[str, dict[str, collections.deque[_Waiter]]] = {}

    def slot(self, ticket: Ticket) -> Slot:
        """An async context manager holding one slot for `ticket` (reusable)."""
        return Slot(self, ticket)

    def waiting(self) -> int:
        return sum(len(q) for evs in self._waiting.values() for q in evs.values())

    def _allowed(self, t: Ticket) -> bool:
        return t.max_connections is None or self.per_model[t.model] < t.max_connections

    def _next(self) -> _Waiter | None:
        """The next waiter in turn that may run, moved out of the queue; its requester and
        evaluation go to the back of their rounds."""
        for requester, groups in self._waiting.items():
            for evaluation, queue in groups.items():
                waiter = next((w for w in queue if self._allowed(w.ticket)), None)
                if waiter is None:
                    continue
                queue.remove(waiter)
                del groups[evaluation]
                if queue:
                    groups[evaluation] = queue
                del self._waiting[requester]
                if groups:
                    self._waiting[requester] = groups
                return waiter
        return None

    def free(self) -> bool:
        now = self.capacity if self.limit is None else min(self.capacity, self.limit())
        return self.used < max(1, now)

    def _dispatch(self) -> None:
        while self.free() and (waiter := self._next()) is not None:
            self._take(waiter.ticket)
            waiter.granted.set()

    def _take(self, t: Ticket) -> None:
        self.used += 1
        self.per_model[t.model] += 1

    def release(self, t: Ticket) -> None:
        self.used -= 1
        self.per_model[t.model] -= 1
        self._dispatch()

    async def acquire(self, t: Ticket) -> None:
        if not self._waiting and self.free() and self._allowed(t):
            # Cancelled before the slot is taken, never after: a cancellation at a plain
            # checkpoint here would leave the slot counted with no block to release it.
            await anyio.lowlevel.checkpoint_if_cancelled()
            self._take(t)
            await anyio.lowlevel.cancel_shielded_checkpoint()
            return
        waiter = _Waiter(t)
        self._waiting.setdefault(t.requester, {}).setdefault(
            t.evaluation, collections.deque()).append(waiter)
        self._dispatch()
        try:
            await waiter.granted.wait()
        except BaseException:
            if waiter.granted.is_set():
                self.release(t)  # granted as it was cancelled: hand it on
            else:
                self._forget(waiter)
            raise

    def _forget(self, waiter: _Waiter) -> None:
        t = waiter.ticket
        evaluations = self._waiting.get(t.requester, {})
        queue = evaluations.get(t.evaluation)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del evaluations[t.evaluation]
            if not evaluations:
                del self._waiting[t.requester]


class Slot:
    def __init__(self, slots: FairSlots, ticket: Ticket) -> None:
        self.slots = slots
        self.ticket = ticket
        self.held = False

    async def __aenter__(self) -> None:
        await self.slots.acquire(self.ticket)
        self.held = True

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.give_back()

    def give_back(self) -> None:
        """The slot handed on before the block ends (a run whose container has ended, with
        only its clean-up left); the block's end then releases nothing."""
        if self.held:
            self.held = False
            self.slots.release(self.ticket)

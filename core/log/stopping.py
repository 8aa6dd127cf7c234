"""A service's stop: graceful, within a deadline, saying what it left.

What must not be cut in half (an event being handled, a checkpoint being recorded, a run's
container being removed) is shielded from the stop's cancellation, as before; but each
shield gives up at the stop's deadline, so a stop during a database outage (a handler
retrying a transient failure without end) or beside a container that hangs ends on time.
What a shield gave up on is not lost: delivery is at least once (the event comes again
after a restart, to this service or another), a lease runs out, an orphan is reaped. The
stop names each one, so the operator reads what will be taken up again.

Every shield in props is a Stop's (`shield(what)`, or `stop.shielded(what)` where a part holds
its own): a bare `anyio.CancelScope(shield=True)` would ignore `--stop-seconds`. The service
makes its Stop the process's (`Stop.current()`, a context variable its tasks inherit), so a
shield deep in the log's code (a subscription closing, a bulk load's cleanup) ends by the
same deadline as the reactors' own.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
from collections.abc import Callable, Iterator

import anyio

log = logging.getLogger("props.serve")

DEADLINE_SECONDS = 10.0  # `props serve --stop-seconds` by default


@dataclasses.dataclass
class Held:
    """One shielded piece of work: what it is, and whether the deadline cut it."""

    what: str
    scope: anyio.CancelScope

    @property
    def abandoned(self) -> bool:
        return self.scope.cancelled_caught


@dataclasses.dataclass
class Stop:
    """The stop of one service (a process's, shared by its parts)."""

    seconds: float = DEADLINE_SECONDS
    deadline: float | None = None  # set when the stop begins
    held: list[Held] = dataclasses.field(default_factory=list)
    left: list[str] = dataclasses.field(default_factory=list)  # what the deadline cut
    # Parts that hand work on when they stop (a launcher's runs in flight) say what, here.
    carriers: list[Callable[[], list[str]]] = dataclasses.field(default_factory=list)
    carried: list[str] = dataclasses.field(default_factory=list)  # what they said

    @contextlib.contextmanager
    def shielded(self, what: str, at_most: float | None = None) -> Iterator[Held]:
        """Run the block to its end whatever cancels around it, but not past the stop's
        deadline (nor `at_most` seconds); `.abandoned` says whether it was cut."""
        scope = anyio.CancelScope(shield=True)
        if at_most is not None:
            scope.deadline = anyio.current_time() + at_most
        if self.deadline is not None:
            scope.deadline = min(scope.deadline, self.deadline)
        held = Held(what, scope)
        self.held.append(held)
        try:
            with scope:
                yield held
        finally:
            self.held.remove(held)
            if held.abandoned and self.deadline is not None:
                self.left.append(what)

    def begin(self) -> None:
        """The stop starts: every shield from now on, and every one open, ends by the
        deadline."""
        self.deadline = anyio.current_time() + self.seconds
        self.carried = [item for carrier in self.carriers for item in carrier()]
        for held in self.held:
            held.scope.deadline = min(held.scope.deadline, self.deadline)

    def report(self) -> str:
        """What the stop left unfinished, for the service's last line."""
        said = []
        if self.left:
            said.append(f"cut at the {self.seconds:g} s deadline (taken up again after a "
                        f"restart): {'; '.join(self.left)}")
        if self.carried:
            said.append(f"handed on: {'; '.join(self.carried)}")
        return "stopped: " + (". ".join(said) if said else "nothing was left unfinished")

    @property
    def unfinished(self) -> bool:
        return bool(self.left or self.carried)

    @contextlib.contextmanager
    def as_current(self) -> Iterator[Stop]:
        """Make this the stop of the tasks started inside the block (`current()`)."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)


# The stop of the service this task belongs to; outside a service (a command, a test), one
# without a deadline until something begins it: a shield that holds as long as its work.
_CURRENT: contextvars.ContextVar[Stop] = contextvars.ContextVar("props_stop")


def current() -> Stop:
    """The stop this task answers to (the service's, else the process's own)."""
    try:
        return _CURRENT.get()
    except LookupError:
        stop = Stop()
        _CURRENT.set(stop)
        return stop


def shield(what: str, at_most: float | None = None) -> contextlib.AbstractContextManager[Held]:
    """`current().shielded(what, at_most)`: the one way to keep a block from being cut."""
    return current().shielded(what, at_most)

"""Every retry in props, by name: what is tried again, how long apart, and for how long.

Each policy is a `Policy` below: tenacity's stop and wait, built once; nothing else in the
package loops over a failure (tests/test_layers.py looks for such a loop and fails on one).
`Policy.call` makes the first attempt before tenacity, so a hot path pays for no controller
until something failed. What a policy retries is the caller's question (`retry_on`),
answered from the one classifier of failures (`faults.kind`: transient, refusal, defect, as
each error class says where it is defined):
- APPEND: an append, an import's batch, grades written by the server. Retried when what
  stopped it is over by the next attempt: the connection went away, a serialization failure
  or deadlock, a concurrent writer moved a stream or stored the same ids first (the next
  attempt re-reads versions and skips what is stored), or the insert ran past the last
  partition (made before the next attempt). Every attempt sends the same event ids, so an
  attempt that did commit but whose answer was lost makes the retry a no-op, never a
  duplicate. The first retry follows at once (a race is usually over), later ones back off.
- READ: a read cut by a lost connection, again on another (reads are idempotent).
- SERVICE: a long-running service whose database went away, until it is back or the caller
  gives up; FOLLOW: a subscription's listener and reads, until the database is back.
- EVENT: a reactor's event whose handler failed for a transient reason, until it succeeds
  (a stop's deadline cuts it); POISON: a handler that failed otherwise, tried a few times
  before the event is parked.
- RUN: an attempt at carrying out a run (reactors/launcher/run_attempts.py says which failures).
- SWAP: a rebuild's swap of the live tables while readers hold them (`swap_for`: through
  the rebuild's reader grace, after which it ends the analysts' sessions, and a while more).
- MODEL_CALL: a call to a model's chat endpoint (core/domain/chat.py says which failures:
  the server unreachable or gone mid-answer, 429, 5xx); a `Retry-After` the server sends is
  honoured up to the policy's cap on it.
- DRIVER: a harness's own query through a database it restarts; API_REQUEST: its run
  requests through replicas it kills (chaos).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import asyncpg
import tenacity

from props.core.log import database, errors, faults

T = TypeVar("T")
log = logging.getLogger(__name__)

RetryOn = Callable[[BaseException], bool]
OnRetry = Callable[[BaseException, int], object]  # (the failure, the attempt that failed)
Wait = Callable[[BaseException, int], float]  # (the failure, the retry's number) -> seconds


@dataclasses.dataclass(frozen=True)
class Policy:
    name: str
    first: float  # seconds before the first retry
    cap: float  # the longest wait
    attempts: int | None  # None: until it succeeds, the caller gives up or is cancelled
    seconds: float | None = None  # stop retrying once this long has passed since the first retry
    jitter: float = 0.0  # up to this many seconds more, drawn per wait
    # tenacity's own stop and wait, built once (`__post_init__`) for the attempts after the
    # first: the retries of every call of the policy are copies of `_rest`.
    _rest: tenacity.AsyncRetrying = dataclasses.field(init=False, repr=False, compare=False)
    _rest_stop: tenacity.stop.stop_base = dataclasses.field(init=False, repr=False,
                                                             compare=False)

    def __post_init__(self) -> None:
        stop: tenacity.stop.stop_base = tenacity.stop_never
        if self.attempts is not None:  # (the first attempt is made before tenacity's)
            stop = tenacity.stop_after_attempt(max(1, self.attempts - 1))
        if self.seconds is not None:
            stop = stop | tenacity.stop_after_delay(self.seconds)
        object.__setattr__(self, "_rest_stop", stop)
        object.__setattr__(self, "_rest", tenacity.AsyncRetrying(
            stop=stop, wait=_Delay(self, 1), sleep=anyio.sleep, reraise=True))

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (from 1): doubling from `first`."""
        wait = min(self.cap, self.first * 2.0 ** max(0, retry - 1))
        return wait + random.uniform(0, self.jitter) if self.jitter else wait

    async def call(self, fn: Callable[[], Awaitable[T]], retry_on: RetryOn, *,
                   on_retry: OnRetry | None = None,
                   stop: Callable[[BaseException], bool] | None = None,
                   wait: Wait | None = None) -> T:
        """`await fn()`, again under this policy while it fails with what `retry_on`
        takes. `stop(failure)` ends the retries early (the failure then propagates); `wait`
        sizes a wait other than by `delay` (a race that needs none). The first attempt runs
        before tenacity: a tenacity call costs about 60 times a bare await (measured: 330
        against 5.5 us), and a hot path (an append, a reactor's event, a read) pays for no
        controller until something failed."""
        try:
            return await fn()
        except Exception as exc:
            first = exc
        if not retry_on(first) or self.attempts == 1 or (stop is not None and stop(first)):
            raise first
        if on_retry is not None:
            on_retry(first, 1)
        await anyio.sleep(wait(first, 1) if wait is not None else self.delay(1))

        async def attempt() -> T:  # a coroutine function, whatever `fn` is: tenacity
            return await fn()      # calls anything else as synchronous

        # Numbered from the second attempt: tenacity's attempt n is the policy's n + 1.
        shifted = None if wait is None else (lambda f, n: wait(f, n + 1))
        again = None if on_retry is None else (lambda f, n: on_retry(f, n + 1))
        result: T = await self._rest.copy(**_hooks(retry_on, again, stop, shifted,
                                                    self._rest_stop))(attempt)
        return result

    def retrying_sync(self, retry_on: RetryOn, *, on_retry: OnRetry | None = None,
                      wait: Wait | None = None) -> tenacity.Retrying:
        """A tenacity controller of this policy for code that is not async (a model call
        from the LLM critic in its container): `policy.retrying_sync(...)(fn)`. `wait` sizes
        a wait other than by `delay` (a server's Retry-After). Every attempt is tenacity's."""
        stop: tenacity.stop.stop_base = tenacity.stop_never
        if self.attempts is not None:
            stop = tenacity.stop_after_attempt(self.attempts)
        if self.seconds is not None:
            stop = stop | tenacity.stop_after_delay(self.seconds)
        base = tenacity.Retrying(stop=stop, wait=_Delay(self, 0), reraise=True)
        return base.copy(**_hooks(retry_on, on_retry, None, wait, stop))


def _failure(state: tenacity.RetryCallState) -> BaseException:
    assert state.outcome is not None
    exc = state.outcome.exception()
    assert exc is not None
    return exc


class _Delay(tenacity.wait.wait_base):
    """A policy's `delay` as tenacity's wait: one formula for every wait of the policy.
    `shift`: how many attempts were made before tenacity's first."""

    def __init__(self, policy: Policy, shift: int) -> None:
        self.policy, self.shift = policy, shift

    def __call__(self, state: tenacity.RetryCallState) -> float:
        return self.policy.delay(state.attempt_number + self.shift)


class _StopWhen(tenacity.stop.stop_base):
    """A caller's early stop, asked of each failure."""

    def __init__(self, when: Callable[[BaseException], bool]) -> None:
        self.when = when

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        return self.when(_failure(state))


def _hooks(retry_on: RetryOn, on_retry: OnRetry | None,
           stop: Callable[[BaseException], bool] | None, wait: Wait | None,
           base_stop: tenacity.stop.stop_base) -> dict[str, Any]:
    """A call's own parts of a policy's controller: what it retries, what it is told of
    each retry, and (when the caller has them) its own early stop and waits."""
    # A cancellation or an exit is never a failure to retry.
    hooks: dict[str, Any] = {"retry": tenacity.retry_if_exception(
        lambda exc: isinstance(exc, Exception) and retry_on(exc))}
    if on_retry is not None:
        hooks["before_sleep"] = lambda state: on_retry(_failure(state), state.attempt_number)
    if stop is not None:
        hooks["stop"] = base_stop | _StopWhen(stop)
    if wait is not None:
        hooks["wait"] = lambda state: wait(_failure(state), state.attempt_number)
    return hooks


APPEND = Policy("append", first=0.02, cap=1.0, attempts=5)
READ = Policy("read", first=0.02, cap=1.0, attempts=5, jitter=0.02)
SERVICE = Policy("service", first=0.2, cap=5.0, attempts=None)
FOLLOW = Policy("follow", first=0.05, cap=5.0, attempts=None)
EVENT = Policy("event", first=0.1, cap=5.0, attempts=None)
POISON = Policy("poison", first=0.05, cap=5.0, attempts=3)
RUN = Policy("run", first=0.2, cap=10.0, attempts=20)
SWAP = Policy("swap", first=0.01, cap=1.0, attempts=200)
MODEL_CALL = Policy("model call", first=0.5, cap=8.0, attempts=5)
MODEL_RETRY_AFTER_CAP = 60.0  # the longest Retry-After honoured (seconds)
DRIVER = Policy("driver", first=0.5, cap=0.5, attempts=None, seconds=60.0)
API_REQUEST = Policy("api request", first=0.2, cap=0.2, attempts=None, seconds=120.0)


def swap_for(seconds: float) -> Policy:
    """SWAP, tried again for `seconds` (a rebuild's reader grace and the time after it)."""
    return dataclasses.replace(SWAP, attempts=None, seconds=seconds)


def of_kinds(*kinds: type[BaseException]) -> RetryOn:
    """Retry on exceptions of these classes (or task-group groups of only them)."""
    return lambda exc: database.only(exc, kinds)


# -- what the append path retries --------------------------------------------------------------

class RetryRace(Exception):
    """Two appends raced on the same stream or event id: run the attempt again (same ids)."""


def retryable(exc: BaseException) -> bool:
    return (faults.transient(exc) or isinstance(exc, RetryRace | asyncpg.UniqueViolationError)
            or errors.stream_moved(exc) or errors.missing_partition(exc))


async def appending(attempt: Callable[[], Awaitable[T]],
                    make_room: Callable[[], Awaitable[object]]) -> T:
    """`await attempt()` until it succeeds, under APPEND; `make_room()` adds the partitions
    a next attempt needs. The last failure propagates as it is."""
    room_needed = False

    def after(failure: BaseException, _: int) -> None:
        nonlocal room_needed
        room_needed = errors.missing_partition(failure)

    async def next_attempt() -> T:
        if room_needed:
            await make_room()
        return await attempt()

    # A race is usually over at once, and a partition once made: neither waits.
    return await APPEND.call(
        next_attempt, retryable, on_retry=after,
        wait=lambda failure, n: 0.0 if n == 1 or errors.missing_partition(failure)
        else APPEND.delay(n - 1))


# -- the loop every long-running service shares -------------------------------------------------

async def keep_serving(
    work: Callable[[], Awaitable[None]], what: str,
    also: tuple[type[BaseException], ...] = (),
    fatal: tuple[type[BaseException], ...] = (),
    give_up: Callable[[], bool] | None = None,
) -> None:
    """Run `work` until it returns or the caller's scope is cancelled; when it fails for a
    transient reason (`faults`: the database went away, a lock session was lost) or with
    only errors of `also`, and none of them `fatal`, wait under SERVICE and run it again,
    unless `give_up()` says it has waited long enough (then `StoreUnavailable`). Stopped by
    cancelling it; the work shields what must finish."""
    def passing(exc: BaseException) -> bool:
        return ((faults.transient(exc) or (bool(also) and database.only(exc, also)))
                and not (fatal and database.only(exc, fatal)))

    def lost(exc: BaseException, _: int) -> None:
        if faults.transient(exc):
            log.warning("%s lost the database (%s); retrying", what, exc)
        else:  # (one of `also`: a checkpoint another instance or a rebuild moved)
            log.info("%s starts again (%s)", what, exc)

    gave_up = False

    def stopping(_: BaseException) -> bool:
        nonlocal gave_up
        gave_up = give_up is not None and give_up()
        return gave_up

    try:
        await SERVICE.call(work, passing, on_retry=lost, stop=stopping)
    except Exception as exc:
        if gave_up:
            raise errors.StoreUnavailable(
                f"{what} gave up waiting for the database: {_first_line(exc)}") from exc
        raise


def _first_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__

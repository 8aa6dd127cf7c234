"""How a run's attempts fail, and which are tried again: the retry rule (props.core.log.faults)
applied to carrying out a run.

Every step of carrying out a run is idempotent (events by derived ids, the container by
name), so an attempt that failed is simply made again, from where the log says it stands.
What the rule says of each error decides:
- transient, the database gone: tried again under retries.RUN (its attempts in a row, then
  the launcher's sweep takes the run up again): nothing can be recorded meanwhile anyway;
- transient, the engine not answering (EngineUnreachable): tried again until `engine_wait`
  seconds have passed since it first did not, then the run fails as engine_unreachable
  (retryable);
- a refusal of the run's own (a PropsError: no image, no snapshot, a secret not allowed):
  failed at once, the error's category its category (a run lost with its node, RunLost:
  run_lost, which the rule calls retryable; it is never started again as the same run);
- a defect of props: failed at once as launcher_defect, with the traceback in the service's
  log, never retried forever.
A run waiting between attempts holds no slot of the launcher: the others go on.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from props.core.log import errors, faults, retries
from props.reactors.runtimes.container_runtime import EngineUnreachable

log = logging.getLogger("props.reactors.launcher")

ENGINE_WAIT_SECONDS = 120.0  # an engine away this long fails its runs (engine_unreachable)

# fail(error, its category or None for the error's own): retryable as the rule says
Fail = Callable[[BaseException, str | None], Awaitable[None]]
Release = Callable[[], Awaitable[object]]


def passing(exc: BaseException) -> bool:
    """Trouble that is over by a later attempt, as the rule says: the engine or the database
    away, a serialization failure or deadlock. A refusal or a defect is not."""
    return faults.transient(exc)


async def carry_out(run_id: uuid.UUID, attempt: Callable[[], Awaitable[None]],
                    slot: AbstractAsyncContextManager[None], fail: Fail,
                    engine_wait: Callable[[], float], release: Release | None = None) -> None:
    """`attempt()` under a slot (the launcher's fair queue), again under retries.RUN while
    trouble passes (see the module's doc); the slot is given back between attempts, and
    after an engine that did not answer, the run's claim too (`release()`, still under the
    slot: never more claims than slots); `engine_wait()` is read at each failure."""
    engine_down_since: float | None = None

    def engine_gone(exc: BaseException) -> bool:
        nonlocal engine_down_since
        if not isinstance(exc, EngineUnreachable):
            return False
        engine_down_since = engine_down_since or time.monotonic()
        return time.monotonic() - engine_down_since >= engine_wait()

    def retried(exc: BaseException, number: int) -> None:
        log.warning("run %s: attempt %d failed (%s: %s); retrying", run_id, number,
                    type(exc).__name__, exc)

    async def under_a_slot() -> None:
        async with slot:
            try:
                await attempt()
            except EngineUnreachable:
                if release is not None:
                    try:
                        await release()
                    except Exception as exc:  # (the database away too: the claim stays)
                        log.warning("run %s: could not give its claim back (%s)", run_id,
                                    type(exc).__name__)
                raise

    try:
        await retries.RUN.call(under_a_slot, passing, on_retry=retried, stop=engine_gone)
    except Exception as exc:
        if engine_gone(exc):
            log.warning("run %s: the engine has not answered for %.0f s: failing it as "
                        "engine_unreachable", run_id, engine_wait())
            await fail(exc, "engine_unreachable")
        elif passing(exc):  # RUN's attempts ran out
            log.error("run %s failed %d times in a row; the next sweep takes it up again",
                      run_id, retries.RUN.attempts)
        elif faults.kind(exc) == "refusal" and isinstance(exc, errors.PropsError):
            log.warning("run %s could not be carried out: %s", run_id, exc)
            await fail(exc, None)
        else:
            log.exception("run %s: a defect of props while carrying it out; the run "
                          "fails as launcher_defect", run_id)
            await fail(exc, "launcher_defect")

"""How a run's attempts fail, and which are tried again: the launcher's one retry policy.

Every step of carrying out a run is idempotent (events by derived ids, the container by
name), so an attempt that failed is simply made again, from where the log says it stands.
Each error is classified once, here:
- the database gone: tried again with backoff (MAX_ATTEMPTS in a row, then the launcher's
  sweep takes the run up again): nothing can be recorded meanwhile anyway;
- the engine not answering (EngineUnreachable): tried again until `engine_wait` seconds have
  passed since it first did not, then the run fails as engine_unreachable (retryable);
- a refusal of the run's own (a PropsError: no image, no snapshot, a secret not allowed):
  failed at once, the error's class its category;
- anything else is a defect of props: failed at once as launcher_defect, with the traceback
  in the service's log, never retried forever.
A run waiting between attempts holds no slot of the launcher: the others go on.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable

import anyio

from props.core.log import database, errors, retries
from props.reactors.containers import EngineUnreachable

log = logging.getLogger("props.reactors.launcher")

MAX_ATTEMPTS = 20  # transient failures in a row before a run waits for the next sweep
ENGINE_WAIT_SECONDS = 120.0  # an engine away this long fails its runs (engine_unreachable)

# fail(error, category or None for the error's class, retryable)
Fail = Callable[[BaseException, str | None, bool], Awaitable[None]]


async def carry_out(run_id: uuid.UUID, attempt: Callable[[], Awaitable[None]],
                    slots: anyio.Semaphore, fail: Fail, engine_wait: float) -> None:
    """`attempt()` under a slot, again while trouble is transient (see the module's doc)."""
    engine_down_since: float | None = None
    for number in range(1, MAX_ATTEMPTS + 1):
        try:
            async with slots:
                await attempt()
            return
        except EngineUnreachable as exc:
            now = time.monotonic()
            engine_down_since = engine_down_since or now
            if now - engine_down_since >= engine_wait:
                log.warning("run %s: the engine has not answered for %.0f s: failing it as "
                            "engine_unreachable", run_id, now - engine_down_since)
                await fail(exc, "engine_unreachable", True)
                return
            failure: BaseException = exc
        except database.UNAVAILABLE as exc:  # (StoreUnavailable and the driver's)
            failure = exc
        except errors.PropsError as exc:
            log.warning("run %s could not be carried out: %s", run_id, exc)
            await fail(exc, None, False)
            return
        except Exception as exc:
            if not retries.transient(exc):  # (a serialization failure, a deadlock: again)
                log.exception("run %s: a defect of props while carrying it out; the run "
                              "fails as launcher_defect", run_id)
                await fail(exc, "launcher_defect", False)
                return
            failure = exc
        log.warning("run %s: attempt %d failed (%s: %s); retrying", run_id, number,
                    type(failure).__name__, failure)
        await anyio.sleep(database.backoff(number, first=0.2, cap=10.0))
    log.error("run %s failed %d times in a row; the next sweep takes it up again", run_id,
              MAX_ATTEMPTS)

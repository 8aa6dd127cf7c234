"""The analysts' sessions a rebuild's swap ends once its grace is over.

The swap takes every live projection table (and the views over them) exclusively, so any
transaction that read one holds it back until that transaction ends. An analyst who runs
short statements in one long transaction never lets go; waiting for them would stall a
rebuild (and `retry-parked`) for as long as they like. The swap waits `grace` seconds, then
ends the analyst sessions holding a lock on schema `projections` (the owner's function
`props.end_projection_readers`, migration 0012) and says which. Only `props_analyst`
sessions are ended: the service's own sessions are waited for, as before.
"""

from __future__ import annotations

import dataclasses
import logging

from props.core.log.store import EventStore
from props.projections import names
from props.schema import queries

log = logging.getLogger(__name__)

READER_GRACE_SECONDS = names.READER_GRACE_SECONDS  # how long the swap waits for readers
AFTER_GRACE_SECONDS = 60.0  # and how long after it for what it may not end


@dataclasses.dataclass(frozen=True)
class Reader:
    pid: int
    role: str


_END = queries.typed("projections", "end_projection_readers", Reader)


async def end(store: EventStore) -> list[Reader]:
    """End the analyst sessions holding the live projections; those ended."""
    ended = await store.sql.rows(_END)
    if ended:
        log.warning("%s", describe(ended))
    return ended


def describe(ended: list[Reader], grace: float | None = None) -> str:
    """One line naming the sessions ended."""
    waited = "" if grace is None else f" past the {grace:g} s reader grace"
    return (f"ended {len(ended)} analyst session(s) holding the live projections{waited} "
            f"so the rebuild could swap: "
            + ", ".join(f"pid {r.pid} ({r.role})" for r in ended))

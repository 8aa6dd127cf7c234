"""A verification recorded without replaying anything, for the tests whose subject is not the
gate (activation's idempotence, imports) but that activate a scorer through it: a passing,
completed `scorer.verified` of the scorer's exact bytes on the log as it is now. The gate's
own tests (tests/test_verification.py) verify for real."""

from __future__ import annotations

import uuid
from typing import Any

from props.core.domain import catalog, streams
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import cohorts, identity, registration, scorers


async def record_verification(store: EventStore, ref: str | scorers.Scorer,
                              metadata: dict[str, Any] | None = None) -> None:
    s = scorers.scorer(ref) if isinstance(ref, str) else ref
    await registration.ensure_registered(store, s)
    cohort = await cohorts.as_of(store)
    await store.append(streams.scorer(s.name), [NewEvent(catalog.ScorerVerified(
        verification_id=uuid.uuid4(), name=s.name, version=s.version,
        identity_hash=identity.identity(s), code_hash=s.code_hash, cohort=cohort.spec,
        status="completed", passed=True,
        candidates=0, replayed_runs=1,
        labels=catalog.Agreement(issues=1, agreed=1, share=1.0)))], metadata=metadata)

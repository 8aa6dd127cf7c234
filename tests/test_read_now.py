"""Decisions on the current state (the active scorer, the runs under a retention hold) read
what is committed now, not what the visibility fence lets a follower read: a transaction left
open anywhere on the server must not make them stale."""

from __future__ import annotations

import uuid

from props.core.domain import catalog, streams
from props.core.domain.archive import archival
from props.core.log.store import EventStore
from props.core.scoring import registration
from tests.conftest import fence_held


async def test_a_hold_and_an_activation_are_seen_while_the_fence_is_held(
        store: EventStore) -> None:
    run = uuid.uuid4()
    await registration.activate(store, *streams.parse_ref("overlap@1"))
    async with fence_held(store):
        await store.append(f"retention-{run}", [catalog.RetentionHeld(
            run_id=run, reason="under review")])
        assert await registration.activate(store, *streams.parse_ref("overlap@2"))
        # The control: a follower of the log does not see either event yet.
        assert (await store.fence_status()).held_back >= 2
        followed = [r.event for b in [b async for b in store.iter_all()] for r in b]
        assert not any(isinstance(e, catalog.RetentionHeld) for e in followed)
        # The decisions do.
        assert await archival.held_runs(store) == {run: "under review"}
        assert await registration.active_scorer(store) == "overlap@2"
        assert not await registration.activate(store, *streams.parse_ref("overlap@2"))

"""What a command just wrote, it reads back, whatever else runs on the server.

The fence (`tx_id < pg_snapshot_xmin(...)`) is for readers that tail the log; a transaction
left open anywhere on the cluster, even in another database, holds it back. `props demo` and
`props eval run` resolve a plan's snapshots right after syncing them: through the fence they
found none ("names no snapshot in the log") while another suite shared the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from props.core.domain import streams
from props.core.domain.specimens import specimen_sync, specimens
from props.core.log.checkpoints import START
from props.core.log.store import EventStore
from props.tools.bundled import samples


@contextmanager
def fence_held(dsn: str) -> Iterator[None]:
    """A transaction with an id, open until the block ends: the fence stays behind it."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pg_current_xact_id()")
        yield
        conn.rollback()


async def test_snapshots_just_synced_are_known_while_the_fence_is_held(
        store: EventStore, server_dsn: str) -> None:
    folder = samples.samples_dir()
    found = specimens.load_valid(folder)
    with fence_held(server_dsn):  # another database of the server: the cluster's fence
        synced = await specimen_sync.sync(store, str(folder), found)
        assert synced.appended == len(found) == 3
        known = await specimen_sync.history(store)
        assert sorted(known) == sorted(s.slug for s in found)
        # Negative control: the fenced read, as `history` read before, sees nothing yet.
        fenced = [r async for batch in store.iter_all(START, category=streams.SNAPSHOT)
                  for r in batch]
        assert fenced == []
    # Unchanged snapshots synced again add nothing: `sync` compares with what is there.
    with fence_held(server_dsn):
        again = await specimen_sync.sync(store, str(folder), found)
        assert again.appended == 0

import uuid

from props.core import catalog
from props.core.store import EventStore


async def test_append_and_read(store: EventStore) -> None:
    run = uuid.uuid4()
    ev = catalog.PhaseCompleted(run_id=run, phase="review", duration_seconds=1.5)
    r = await store.append(f"run-{run}", [ev], expected_version=0)
    assert r.last_version == 1
    got = await store.read_all()
    assert [g.event for g in got] == [ev]

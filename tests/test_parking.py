"""No consumer stops for everyone because of one event: it parks the event and goes on.

The inputs are what an older props accepted before the catalog bounded its values (token
counts of 2^63 - 1), or what a foreign writer stored: built here without validation, as such
a writer would, and appended as they are.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from props.core.domain import catalog, parking
from props.core.log.store import EventStore
from props.projections import engine, figures
from props.projections import parking as projection_parking
from tests import test_strict_recall
from tests.conftest import rebuilt
from tests.reactor_helpers import QUICK_AGENT, eventually, finished, push_code, request
from tests.test_projections import caught_up, dump, every_kind_of_event

HUGE = 2**63 - 1


async def _overflowing_usage(store: EventStore) -> list[int]:
    """Three responses of one run whose token counts no bigint sum holds; their positions."""
    run_id = uuid.uuid4()
    result = await store.append(f"run-{run_id}", [catalog.LlmResponded.model_construct(
        run_id=run_id, request_id=f"r{i}", response_sha256="0" * 64, tokens_in=HUGE,
        tokens_out=0, cost_usd=0.0, latency_ms=1.0) for i in range(3)])
    rows = await store.pool.fetch(
        "SELECT global_position FROM props.events WHERE stream_id = $1 ORDER BY 1",
        f"run-{run_id}")
    assert result is not None
    return [r[0] for r in rows]


async def _follow(store: EventStore) -> engine.Runner:
    runner = engine.Runner(store, batch_size=53, poll_interval=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await caught_up(store)
        tg.cancel_scope.cancel()
    return runner


async def test_a_projection_parks_what_it_cannot_fold_and_folds_the_rest(
        store: EventStore) -> None:
    w = await every_kind_of_event(store, runs=20)
    await _follow(store)  # built from the log; then followed live:
    positions = await _overflowing_usage(store)
    await w.append_runs(store, 10)  # after the poison: still folded
    runner = await _follow(store)
    assert runner.stats.parked == 2  # the first response fits; each later one overflows
    usage = projection_parking.consumer(engine.by_name(["usage"])[0])
    parked = await parking.parked(store, usage)
    assert sorted(p.global_position for p in parked.values()) == positions[1:]
    assert {p.error_type for p in parked.values()} == {"NumericValueOutOfRangeError"}
    for other in engine.ALL:  # parked for that projection only
        if other.name != "usage":
            assert not await parking.parked(store, projection_parking.consumer(other))
    incremental = await dump(store)
    assert len(incremental["agent_runs"]) == 30 + 4  # every run, the ones after it too
    await rebuilt(store)  # the rebuild skips what the runner parked: the same rows
    assert await dump(store) == incremental


async def test_negative_control_without_parking_the_runner_stops(
        store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await every_kind_of_event(store, runs=5)
    await _overflowing_usage(store)
    monkeypatch.setattr(projection_parking, "poisoned", lambda exc: False)
    with pytest.raises(BaseException) as stopped:
        with anyio.fail_after(60):
            await engine.Runner(store, batch_size=53, poll_interval=0.05).run()

    def messages(exc: BaseException) -> list[str]:
        if isinstance(exc, BaseExceptionGroup):
            return [m for e in exc.exceptions for m in messages(e)]
        return [str(exc)]

    assert any("out of range" in m for m in messages(stopped.value)), stopped.value


async def test_retry_parked_takes_them_up_again(store: EventStore) -> None:
    """After an upgrade a person retries: the events are no longer skipped; those that
    still cannot be folded are parked again, under new ids."""
    await every_kind_of_event(store, runs=5)
    await _overflowing_usage(store)
    await _follow(store)
    usage = engine.by_name(["usage"])[0]
    first = await parking.parked(store, projection_parking.consumer(usage))
    assert await parking.retry_all(store, projection_parking.consumer(usage), "ada") == 2
    assert await parking.parked(store, projection_parking.consumer(usage)) == {}
    await rebuilt(store, [usage])  # (still overflowing: parked again)
    again = await parking.parked(store, projection_parking.consumer(usage))
    assert set(again) == set(first) and {p.tries for p in again.values()} == {1}


async def test_a_reactor_parks_an_event_it_cannot_read(served: EventStore) -> None:
    """A run request past the catalog's bounds (stored by a writer that skipped it): the
    launcher parks it at once and launches the honest run requested after it."""
    store = served
    bad = uuid.uuid4()
    await store.append(f"run-{bad}", [catalog.RunRequested.model_construct(
        run_id=bad, agent_type="critic", definition="quick", definition_ref="latest",
        example=catalog.Example(snapshot="csvtool/2025-09-03-00"), model="m",
        timeout_seconds=float("inf"), budget_usd=1.0, requested_by=None)])
    await push_code(store, "quick", QUICK_AGENT)
    [honest] = await request(store, "quick")
    assert (await finished(store, [honest]))[honest].status == "completed"

    async def parked_once() -> bool:  # the launcher's queue may launch before its reader parks
        return bool(await parking.parked(store, "launcher"))

    await eventually(parked_once)
    parked = await parking.parked(store, "launcher")
    assert [p.error_type for p in parked.values()] == ["InvalidEvent"]
    assert "timeout_seconds" in next(iter(parked.values())).error_message


async def test_the_report_counts_a_run_touched_by_a_parked_event_apart(
        store: EventStore) -> None:
    """A run one of whose events a projection skips has figures that may be partial: the
    report puts it in a state of its own, never silently among the scored, and gives it
    back to them once the park is taken up again."""
    run = await test_strict_recall.graded_run(store)
    _records, before = await figures.load(store, "tiered", 2)
    assert (before["scored"], before["parked"]) == (1, 0)  # the control: nothing parked yet
    await store.append(f"run-{run}", [catalog.LlmResponded.model_construct(
        run_id=run, request_id=f"r{i}", response_sha256="0" * 64, tokens_in=HUGE,
        tokens_out=0, cost_usd=0.0, latency_ms=1.0) for i in range(2)])
    await rebuilt(store)
    _records, notes = await figures.load(store, "tiered", 2)
    assert (notes["scored"], notes["parked"], notes["critic_runs"]) == (0, 1, 1)
    usage = projection_parking.consumer(engine.by_name(["usage"])[0])
    assert await parking.retry_all(store, usage, "ada") == 1
    _records, retried = await figures.load(store, "tiered", 2)
    assert (retried["scored"], retried["parked"]) == (1, 0)

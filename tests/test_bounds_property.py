"""For any events the catalog accepts, and any that an older props or a foreign writer stored
past its bounds, each projection folds them or parks them, rebuild equals incremental, and the
runner never stops (hypothesis: values drawn from each field's range, its bounds and one past
each; the catalog refuses every one-past value where it enters).

Negative control: tests/test_parking.py runs the runner with parking disabled on such an
input and sees it stop.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import hypothesis
import pydantic
import pytest
from hypothesis import strategies as st

from props.core.domain import catalog
from props.core.domain.catalog import parts
from props.core.log import errors
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.projections import engine
from props.projections import status as projection_status


def _bounded(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Values across the range, its bounds, and one past each."""
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, lo - 1, hi + 1]))


def _responses(run_id: uuid.UUID) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "run_id": st.just(str(run_id)), "request_id": st.just("r"),
        "response_sha256": st.just("0" * 64),
        "tokens_in": _bounded(0, parts.MAX_CALL_TOKENS),
        "tokens_out": st.one_of(_bounded(0, parts.MAX_CALL_TOKENS), st.just(2**63 - 1)),
        "cost_usd": st.one_of(st.floats(0, parts.MAX_CALL_USD), st.sampled_from(
            [parts.MAX_CALL_USD * 2, float("inf"), float("nan")])),
        "latency_ms": st.floats(0, 1e10)})


def _issues(run_id: uuid.UUID) -> st.SearchStrategy[dict[str, Any]]:
    line = st.one_of(_bounded(1, parts.INT32), st.just(3_000_000_000))
    ranges = st.tuples(line, line).map(lambda ab: {"start": min(ab), "end": max(ab)})
    return st.fixed_dictionaries({
        "run_id": st.just(str(run_id)), "issue_id": st.text("abc", min_size=1, max_size=5),
        "rationale": st.just("why"),
        "locations": st.lists(st.fixed_dictionaries({
            "file": st.just("a.py"), "ranges": st.lists(ranges, min_size=1, max_size=3)}),
            min_size=1, max_size=3)})


def _event(type_name: str, data: dict[str, Any]) -> tuple[Event, bool]:
    """The event, and whether the catalog accepts it (else built as a writer that skipped
    the catalog would build it: stored as it is)."""
    try:
        return catalog.REGISTRY.parse(type_name, data), True
    except errors.InvalidEvent:
        cls = catalog.REGISTRY.require(type_name)
        data = {**data, "run_id": uuid.UUID(data["run_id"])}
        if type_name == "issue.reported":
            data = {**data, "locations": [catalog.Location.model_construct(
                file=loc["file"], ranges=[catalog.LineRange.model_construct(**r)
                                          for r in loc["ranges"]]) for loc in data["locations"]]}
        return cls.model_construct(**({"severity": None} if type_name == "issue.reported"
                                      else {}), **data), False


@st.composite
def _batches(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    run_id = uuid.uuid4()
    out: list[tuple[str, dict[str, Any]]] = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            out.append(("llm.responded", draw(_responses(run_id))))
        else:
            out.append(("issue.reported", draw(_issues(run_id))))
    return out


async def _caught_up(store: EventStore) -> None:
    runner = engine.Runner(store, batch_size=7, poll_interval=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)  # a runner that stopped would raise here
        with anyio.fail_after(60):
            while any(s.lag_events for s in await projection_status.of(store)):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()


@pytest.mark.slow
@hypothesis.settings(max_examples=12, deadline=None, derandomize=True,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(batch=_batches())
async def test_every_input_is_folded_or_parked_and_rebuild_agrees(
        store: EventStore, batch: list[tuple[str, dict[str, Any]]]) -> None:
    events = [_event(type_name, data) for type_name, data in batch]
    for event, accepted in events:
        if not accepted:  # the boundary refuses it, naming the field
            with pytest.raises(pydantic.ValidationError):
                type(event).model_validate(event.model_dump())
    await store.append(f"run-{uuid.uuid4()}", [e for e, _ in events])
    await _caught_up(store)
    incremental = await projection_status.snapshot_rows(store)
    await engine.rebuild(store)
    assert await projection_status.snapshot_rows(store) == incremental

"""Fair service (issue 43 item 4, issue 44 item 5): each requester's bounded share, a queue
served in turn, detached evaluations held to their plan by the service, `max_connections`
held for every run of a model, and a launcher that holds no more runs than its slots when
its engine does not answer. On the real database, with real local processes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from props.core.domain import catalog
from props.core.log.store import EventStore
from props.reactors.host import ReactorHost
from props.reactors.launcher import fair_queue
from props.reactors.launcher.launcher import Launcher
from props.reactors.runtimes.container_runtime import ContainerSpec, EngineUnreachable
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.reactor_helpers import SNAPSHOT, eventually, finished, push_code, sync_samples
from tests.test_launchers import WAIT, most_at_once, runs_by_launcher, served_until_finished

# -- the fair queue ----------------------------------------------------------------------------


async def _order(tickets: list[fair_queue.Ticket], capacity: int) -> list[int]:
    """The order in which `tickets` (queued in this order) get a slot."""
    slots, got = fair_queue.FairSlots(capacity), []
    hold = anyio.Event()

    async def one(n: int) -> None:
        async with slots.slot(tickets[n]):
            got.append(n)
            await hold.wait()

    async with anyio.create_task_group() as tg:
        for n in range(len(tickets)):
            tg.start_soon(one, n)
            await anyio.lowlevel.checkpoint()
        await eventually(lambda: slots.waiting() == len(tickets) - capacity)
        while len(got) < len(tickets):  # one slot freed at a time
            hold.set()
            hold = anyio.Event()
            await anyio.sleep(0.01)
        hold.set()
    return got


async def test_the_queue_serves_requesters_then_evaluations_in_turn() -> None:
    a = [fair_queue.Ticket("api:a", "big")] * 10
    b = [fair_queue.Ticket("api:b")]
    order = await _order(a + b, capacity=1)
    assert order.index(10) <= 2  # B's one run, queued behind A's 10: second in line
    # Within one requester, its evaluations take turns too.
    two = [fair_queue.Ticket("api:a", "e1")] * 5 + [fair_queue.Ticket("api:a", "e2")]
    assert (await _order(two, capacity=1)).index(5) <= 2


async def test_a_models_max_connections_holds_in_the_queue() -> None:
    solo = [fair_queue.Ticket("x", "", "llm", 1)] * 3 + [fair_queue.Ticket("x", "", "ref")]
    slots = fair_queue.FairSlots(3)
    async with slots.slot(solo[0]):
        for t in solo[1:]:
            with anyio.move_on_after(0.05):
                await slots.acquire(t)
        assert slots.per_model["llm"] == 1 and slots.per_model["ref"] == 1  # the rest wait
        slots.release(solo[3])


async def _request(store: EventStore, definition: str, by: str, count: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(count)]
    await store.append_many([(f"run-{r}", [catalog.RunRequested(
        run_id=r, agent_type="critic", definition=definition, definition_ref="latest",
        example=catalog.Example(snapshot=SNAPSHOT), model="m", timeout_seconds=60,
        budget_usd=0, requested_by=by)]) for r in ids])
    return ids


async def _launch_order(store: EventStore, run_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    rows = await store.pool.fetch(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'container.started' "
        "ORDER BY global_position")
    wanted = {str(r) for r in run_ids}
    return [uuid.UUID(r[0]) for r in rows if r[0] in wanted]


async def test_another_requesters_run_does_not_wait_behind_a_flood(
        store: EventStore, tmp_path: Path) -> None:
    """A queues 12 runs, then B one: B's is among the first launches (one FIFO put it 13th,
    which this test would see: the negative control is the order itself)."""
    await sync_samples(store)
    await push_code(store, "quick", WAIT.format(seconds=0.05))
    flood = await _request(store, "quick", "api:a", 12)
    [mine] = await _request(store, "quick", "api:b", 1)
    launcher = Launcher(store, [LocalRuntime(tmp_path / "c", trust_commands=True)],
                        tmp_path / "work", max_concurrent=1)
    await served_until_finished(store, [ReactorHost(store, launcher, poll_interval=0.05)],
                                [*flood, mine])
    order = await _launch_order(store, [*flood, mine])
    assert len(order) == 13 and order.index(mine) <= 2, order.index(mine)


@pytest.mark.parametrize("limit", [1, None])
async def test_max_connections_holds_outside_evaluations(
        store: EventStore, tmp_path: Path, limit: int | None) -> None:
    """`runs request --count 4` of a model with max_connections = 1: one at a time on a
    launcher of 4 slots. Control (no max_connections): they do overlap, so the measure can
    see it."""
    await sync_samples(store)
    config: dict[str, object] = {} if limit is None else {"max_connections": limit}
    await push_code(store, "solo", WAIT.format(seconds=0.4), config=config)
    run_ids = await _request(store, "solo", "cli", 4)
    launcher = Launcher(store, [LocalRuntime(tmp_path / "c", trust_commands=True)],
                        tmp_path / "work", max_concurrent=4)
    await served_until_finished(store, [ReactorHost(store, launcher, poll_interval=0.05)],
                                run_ids)
    spans = _spans(await runs_by_launcher(store, run_ids))
    assert (most_at_once(spans) == 1) == (limit == 1), spans


class _HeldRemoval(LocalRuntime):
    """A local runtime whose removal of a container waits until the test lets it end (at
    most `HOLD` seconds), counting the removals that waited that long."""

    HOLD = 30.0

    def __init__(self, root: Path) -> None:
        super().__init__(root, trust_commands=True)
        self.may_end = anyio.Event()
        self.waited_out = 0

    async def remove(self, name: str) -> None:
        await super().remove(name)
        with anyio.move_on_after(self.HOLD) as held:
            await self.may_end.wait()
        self.waited_out += held.cancelled_caught


async def test_a_finished_runs_clean_up_holds_no_slot(
        store: EventStore, tmp_path: Path) -> None:
    """Capacity 1, two runs, and the first run's container removal does not end until the
    second run's container has started: it starts (the slot is handed on at
    `run.finished`). A slot held through the clean-up would wait for the removal, which
    would then wait out its 30 s: the negative control, measured."""
    await sync_samples(store)
    await push_code(store, "quick", WAIT.format(seconds=0.05))
    first, second = await _request(store, "quick", "cli", 2)
    runtime = _HeldRemoval(tmp_path / "c")
    launcher = Launcher(store, [runtime], tmp_path / "work", max_concurrent=1)

    async def both_started() -> bool:
        found = await store.read_streams([f"run-{first}", f"run-{second}"])
        return all(any(r.type_name == "container.started" for r in recs)
                   for recs in found.values()) and len(found) == 2

    async with anyio.create_task_group() as tg:
        tg.start_soon(ReactorHost(store, launcher, poll_interval=0.05).run)
        await eventually(both_started)
        runtime.may_end.set()
        await finished(store, [first, second])
        tg.cancel_scope.cancel()
    assert runtime.waited_out == 0


def _spans(events: dict[uuid.UUID, list[Any]]) -> list[Any]:
    out = []
    for recs in events.values():
        started = [r.recorded_at for r in recs if r.type_name == "container.started"]
        exited = [r.recorded_at for r in recs if r.type_name == "container.exited"]
        out.append((started[0], exited[0]))
    return out


# -- a launcher whose engine never answers ----------------------------------------------------


class Unanswering(LocalRuntime):
    """An engine that never answers (the Protocol's own failure, as Docker's runtime raises
    it when its socket is dead)."""

    async def start(self, spec: ContainerSpec) -> str:
        raise EngineUnreachable("the container engine does not answer (test)")


async def test_a_launcher_whose_engine_is_gone_holds_no_more_than_its_slots(
        store: EventStore, tmp_path: Path) -> None:
    """The sick launcher (capacity 2) claims, fails to start, and gives each run back
    (`run.released`) under its slot: it never holds more than 2 claims, and the healthy
    launcher carries out all 6. Old code: the sick one held all 6 while the other idled,
    and they failed as engine_unreachable (the control: the claims count and the status)."""
    await sync_samples(store)
    await push_code(store, "quick", WAIT.format(seconds=0.05))
    run_ids = await _request(store, "quick", "api:a", 6)
    sick = Launcher(store, [Unanswering(tmp_path / "sick", trust_commands=True)],
                    tmp_path / "w-sick", max_concurrent=2, name="sick", engine_wait=60)
    healthy = Launcher(store, [LocalRuntime(tmp_path / "ok", trust_commands=True)],
                       tmp_path / "w-ok", max_concurrent=2, name="healthy")
    async with anyio.create_task_group() as tg:
        tg.start_soon(ReactorHost(store, sick, poll_interval=0.05).run)
        await eventually(lambda: _released(store))  # the sick one claimed, and gave back
        tg.start_soon(ReactorHost(store, healthy, poll_interval=0.05).run)
        done = await finished(store, run_ids, seconds=90)
        tg.cancel_scope.cancel()
    assert {f.status for f in done.values()} == {"completed"}
    held = most_claims(await store.pool.fetch(
        "SELECT type, data->>'run_id' AS run, data->>'launcher' AS launcher FROM props.events "
        "WHERE type IN ('run.claimed', 'run.released', 'run.finished') "
        "ORDER BY global_position"), "sick")
    assert 1 <= held <= 2, held


async def _released(store: EventStore) -> bool:
    return bool(await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'run.released'"))


def most_claims(rows: list[Any], launcher: str) -> int:
    """The most runs `launcher` held a claim on at once, from the log's order."""
    holder: dict[str, str | None] = {}
    most = 0
    for row in rows:
        if row["type"] == "run.claimed":
            holder[row["run"]] = row["launcher"]
        else:  # released or finished
            holder[row["run"]] = None
        most = max(most, sum(1 for h in holder.values() if h == launcher))
    return most


def test_most_claims_counts_what_is_held() -> None:
    rows = [{"type": "run.claimed", "run": r, "launcher": "s"} for r in "abc"]
    assert most_claims(rows, "s") == 3
    rows.insert(1, {"type": "run.released", "run": "a", "launcher": "s"})
    assert most_claims(rows, "s") == 2


async def test_the_slots_follow_what_the_engine_holds_just_now() -> None:
    """A cluster's capacity falls (a node down) and comes back: a grant never passes the
    limit read at that moment, nor the launcher's own capacity. The control: the same slots
    without a limit grant up to their capacity."""
    limit = [1]
    slots, t = fair_queue.FairSlots(3, lambda: limit[0]), fair_queue.Ticket("a")
    granted: list[int] = []

    async def take(n: int) -> None:
        await slots.acquire(t)
        granted.append(n)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(take, n)
        await anyio.sleep(0.1)
        assert granted == [0] and slots.used == 1  # the node gone: one at once
        limit[0] = 10  # back, and more than the launcher's own capacity
        slots.release(t)
        await anyio.sleep(0.1)
        assert granted == [0, 1, 2, 3] and slots.used == 3  # its own capacity caps it
        for _ in range(3):
            slots.release(t)
    unlimited = fair_queue.FairSlots(3)
    for _ in range(3):
        await unlimited.acquire(t)
    assert unlimited.used == 3

"""The swarm runtime on a real two-node Docker Swarm on this machine (tests/swarm_helpers.py):
the shipped runtime contract; what only a cluster engine asks (the end marker, files as
configs, the image pinned by digest); and an evaluation of 20 cases across both nodes with
the worker's daemon killed mid-way: every case exactly once in the standing, the runs lost
with the worker marked `run_lost` and run again, none run twice.

Skipped, with the reason, where the swarm cannot run; required under PROPS_REQUIRE_SWARM=1."""

from __future__ import annotations

import collections
import random
import time
import uuid
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiodocker
import anyio
import anyio.to_thread
import pytest

from props.core.domain import catalog, evaluation_starts, evaluations
from props.core.log import errors
from props.core.log.store import EventStore
from props.projections import evaluation_standing
from props.reactors import evaluation_driver as driver
from props.reactors.host import ReactorHost
from props.reactors.launcher.launcher import Launcher
from props.reactors.runtimes import runtime_registry, swarm_runtime
from props.reactors.runtimes.container_runtime import (
    LABEL,
    ContainerRuntime,
    ContainerSpec,
    Mount,
    RunLost,
    VaryingCapacity,
)
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.reactors.runtimes.runtime_contract import RuntimeContract
from props.reactors.runtimes.swarm_runtime import SwarmRuntime
from props.tools.checks.chaos import swarm_worker
from props.tools.checks.swarm import rig
from tests.reactor_helpers import eventually, sync_samples
from tests.swarm_helpers import opened_swarm, swarm  # noqa: F401 (the session's fixture)

pytestmark = pytest.mark.swarm
PYTHON = "/usr/bin/python3"  # the critic image's own


@pytest.mark.usefixtures("swarm")
class TestSwarmRuntime(RuntimeContract):
    interpreter = PYTHON
    oom_may_go_unreported = True  # the manager's task says exit 137, never OOM

    @pytest.fixture(autouse=True)
    def _rig(self, swarm: rig.Rig) -> None:  # noqa: F811
        self.rig = swarm
        self.image = swarm.image

    def make_runtime(self, tmp_path: Path) -> AbstractAsyncContextManager[ContainerRuntime]:
        return opened_swarm(self.rig)


async def test_props_serve_opens_it_by_name_and_only_by_name(
        swarm: rig.Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.delenv("PROPS_SWARM_HOST", raising=False)
    registration = runtime_registry.get("swarm")
    options = runtime_registry.Options(work_dir=tmp_path, engine=swarm.manager)
    async with registration.open(options, True) as rt:
        assert rt is not None and rt.kind == "swarm" and rt.capacity() >= 2
    async with registration.open(runtime_registry.Options(work_dir=tmp_path), False) as absent:
        assert absent is None  # auto, and no PROPS_SWARM_HOST: not this machine's
    with pytest.raises(errors.ConfigurationError, match="PROPS_SWARM_HOST"):
        async with registration.open(runtime_registry.Options(work_dir=tmp_path), True):
            pass


def test_the_end_marker_tells_a_whole_output_from_a_cut_one() -> None:
    whole = b"line one\npartial" + b"\n" + swarm_runtime.MARK + b"3 17\n"
    assert swarm_runtime.ended_output(whole) == (3, b"line one\npartial\n")
    assert swarm_runtime.ended_output(b"line one\n") is None  # the marker lost
    cut = b"line one\n" + swarm_runtime.MARK + b"0 40\n"  # bytes missing before it
    assert swarm_runtime.ended_output(cut) is None
    assert swarm_runtime.ended_output(swarm_runtime.MARK + b"0 0\n") == (0, b"")


def _spec(made: rig.Rig, code: str, **fields: object) -> ContainerSpec:
    return ContainerSpec(name=f"props-test-{uuid.uuid4().hex[:12]}", image=made.image,
                         command=[PYTHON, "-c", code],
                         labels={LABEL: str(uuid.uuid4())}, **fields)  # type: ignore[arg-type]


async def test_a_run_sees_its_files_without_host_binds_pinned_and_confined(
        swarm: rig.Rig, tmp_path: Path) -> None:  # noqa: F811
    """The example's files reach the task as configs (no bind of the host's folder), the
    service runs the image by digest, as nobody, with a read-only root and no network."""
    example = tmp_path / "example"
    (example / "pkg").mkdir(parents=True)
    (example / "pkg" / "mod.py").write_text("x = 1\n")
    code = ("import os, socket; print(open('/example/pkg/mod.py').read().strip(), os.getuid());"
            "print(sorted(os.listdir('/sys/class/net')));"
            "open('/probe', 'w')")
    spec = _spec(swarm, code, mounts=[Mount(str(example), "/example")])
    async with opened_swarm(swarm) as rt:
        try:
            await rt.start(spec)
            outcome = await rt.wait(spec.name, 120)
            logs = await rt.logs(spec.name)
            service = await rt.docker.services.inspect(spec.name)
        finally:
            await rt.remove(spec.name)
        container = service["Spec"]["TaskTemplate"]["ContainerSpec"]
        assert "@sha256:" in container["Image"] and not container.get("Mounts")
        assert b"x = 1 65534" in logs and b"['lo']" in logs, logs
        assert b"Read-only file system" in logs and outcome is not None \
            and outcome.exit_code == 1
        assert swarm_runtime.MARK not in logs
        left = await rt.docker.configs.list(filters={"label": [f"{swarm_runtime.OF}={spec.name}"]})
        assert left == []  # its files went with it


async def test_an_output_without_its_end_is_a_lost_run_never_a_completed_one(
        swarm: rig.Rig) -> None:  # noqa: F811
    """The negative control of the end marker, on the real engine: the same task without
    the wrapper ends `complete`, exit 0, with all its output; the runtime still calls it
    lost, removes it and leaves its tombstone."""
    spec = _spec(swarm, "print('all of it')")
    async with opened_swarm(swarm) as rt:
        template = await rt._template(spec)
        template["ContainerSpec"]["Command"] = spec.command  # no wrapper: no end marker
        try:
            await rt.docker.services.create(
                template, name=spec.name, labels=spec.labels,
                mode={"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}})
            with pytest.raises(RunLost, match="without its output's end"):
                await rt.wait(spec.name, 120)
            assert await rt._service(spec.name) is None and spec.name in await rt.names()
        finally:
            await rt.remove(spec.name)


async def test_a_tag_is_pinned_to_its_digest_by_the_manager(swarm: rig.Rig) -> None:  # noqa: F811
    tagged = swarm.image.split("@", 1)[0] + ":bookworm"
    async with opened_swarm(swarm) as rt:
        assert await rt._pinned(tagged) == swarm.image
        with pytest.raises(Exception, match="cannot resolve image"):
            await rt._pinned(swarm.image.split("@", 1)[0] + ":no-such-tag")


# -- the worker's daemon killed mid-evaluation ---------------------------------------------------

CRITIC = "import time; time.sleep(3); print('reviewed')"
NODE_GRACE = 3.0  # seconds: the worker is Down ~4 s after its daemon dies (heartbeat 1 s)


async def _push_swarm_critic(store: EventStore, image: str) -> None:
    await swarm_worker.push_critic(store, image, name="swarm-critic", script=CRITIC)


async def _swarm_evaluation(store: EventStore, image: str, name: str, *, epochs: int,
                            at_once: int) -> evaluations.Evaluation:
    """The samples synced, the swarm critic pushed, and an evaluation of it over two
    examples started (`epochs` each, `at_once` runs at most in flight)."""
    await sync_samples(store)
    await _push_swarm_critic(store, image)
    plan = evaluations.Plan(name=name, examples=["csvtool/*", "logparse/*"], epochs=epochs,
                            max_concurrency=at_once, timeout_seconds=120,
                            critic=[evaluations.Critic(definition="swarm-critic", ref="swarm")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    return ev


async def _containers_by_run(made: rig.Rig) -> collections.Counter[str]:
    """Every container either node's engine holds for a run (20.10 keeps exited job
    containers: each one is an execution)."""
    count: collections.Counter[str] = collections.Counter()
    for url in (made.manager, made.worker):
        async with aiodocker.Docker(url=url, api_version=swarm_runtime.API_VERSION) as node:
            for c in await node.containers.list(all=True, filters={"label": [LABEL]}):
                count[c._container["Labels"][LABEL]] += 1
    return count


async def _kill_worker_when_busy(store: EventStore, rt: SwarmRuntime, made: rig.Rig,
                                 killed: list[float]) -> None:
    """Kill the worker's daemon mid-way: six runs finished, and two running on it."""
    async def mid_way() -> bool:
        on_worker = {n for n, host in rt.placed.items() if host == made.worker_host}
        done = {r[0] for r in await store.pool.fetch(
            "SELECT data->>'run_id' FROM props.events WHERE type = 'run.finished'")}
        return len(done) >= 6 and len({n for n in on_worker if n[-36:] not in done}) >= 2

    await eventually(mid_way, 120)
    await anyio.to_thread.run_sync(made.kill_worker)
    killed.append(time.monotonic())


@pytest.mark.slow
async def test_an_evaluation_across_both_nodes_survives_the_worker_s_death(
        store: EventStore, swarm: rig.Rig, tmp_path: Path) -> None:  # noqa: F811
    ev = await _swarm_evaluation(store, swarm.image, "swarm-eval", epochs=10, at_once=6)
    assert len(ev.cases) == 20
    killed: list[float] = []
    t0 = time.monotonic()
    try:
        async with opened_swarm(swarm, node_grace=NODE_GRACE) as rt, \
                anyio.create_task_group() as tg:
            tg.start_soon(_kill_worker_when_busy, store, rt, swarm, killed)
            driven = await driver.serve_until_done(
                store, ev, [LocalRuntime(tmp_path / "local", trust_commands=True), rt],
                driver.Stops(wait=300, retry_failed=2), lambda line: None)
            tg.cancel_scope.cancel()
            placed = collections.Counter(rt.placed.values())
    finally:
        took = time.monotonic() - t0
        await anyio.to_thread.run_sync(swarm.restart_worker)
    assert killed, "the worker was never busy: the test killed nothing"
    print(f"\n20 cases in {took:.1f} s; worker killed at +{killed[0] - t0:.1f} s; "
          f"tasks seen running per node: {dict(placed)}")
    assert set(placed) == {swarm.manager_host, swarm.worker_host}  # both nodes ran cases

    standing = await evaluation_standing.of(store, ev, figures=False)
    assert driven.outcome == "complete" and standing.complete
    assert len({s.case.key for s in standing.states}) == len(standing.states) == 20
    assert standing.counts == {"scored": 20}  # every case once, each with a result
    lost = [s for s in standing.states if s.attempts > 1]
    assert lost, "no run was lost with the worker"
    for s in lost:  # each earlier attempt lost, marked so, retryable; the last one scored
        first = ev.run_id(s.case, 0)
        finished = [r.event for r in await store.read_stream(f"run-{first}")
                    if isinstance(r.event, catalog.RunFinished)]
        assert [(f.status, f.failure) for f in finished] == [("failed", catalog.Failure(
            phase="report", category="run_lost", retryable=True))]

    # Never run twice: each run is one container on one of the engines, the worker's
    # included once it is back (it kills the lost runs' containers, never restarts them).
    await anyio.sleep(3)
    ours = {r[0] for r in await store.pool.fetch(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'run.requested'")}
    executions = {run: n for run, n in (await _containers_by_run(swarm)).items() if run in ours}
    assert len(executions) >= 20 and max(executions.values()) == 1, executions
    async with opened_swarm(swarm) as rt:
        assert await rt.prune() >= 1  # the finished job containers 20.10 keeps for ever
    assert sum((await _containers_by_run(swarm)).values()) < sum(executions.values())


async def test_a_lost_run_is_never_started_again(swarm: rig.Rig) -> None:  # noqa: F811
    """Its tombstone outlives the launcher that wrote it: `start` finds it and starts
    nothing, `wait` says lost again, `names` still lists it; `remove` forgets it."""
    spec = _spec(swarm, "print('never')")
    async with opened_swarm(swarm) as rt:
        try:
            await rt._end(spec.name, {"Spec": {"Labels": spec.labels}}, "lost")
            await rt.start(spec)
            assert await rt._service(spec.name) is None
            with pytest.raises(RunLost):
                await rt.wait(spec.name, 5)
            assert spec.name in await rt.names()
        finally:
            await rt.remove(spec.name)
        assert spec.name not in await rt.names()


# -- the chaos mode: the worker's daemon killed mid-evaluation, and back ------------------------

@pytest.mark.slow
async def test_chaos_kills_the_worker_mid_evaluation_and_every_invariant_holds(
        store: EventStore, swarm: rig.Rig, tmp_path: Path) -> None:  # noqa: F811
    """`props chaos --kill-swarm-worker`'s run on the session's swarm, with a seed: the kill
    lands (two runs on the worker), the worker comes back mid-evaluation within the node
    grace, so its runs are lost only by their output's missing end (the evaluation test
    above covers a node Down past the grace), and every invariant is checked, none NORUN."""
    lines: list[str] = []
    began = time.monotonic()
    kill, invariants = await swarm_worker.kill_worker_mid_evaluation(
        store, swarm, tmp_path, random.Random(9), lines.append, way="returns")
    print(f"\n{kill.detail()}; {time.monotonic() - began:.1f} s in all")
    for i in invariants:
        print(f"  {i.name}: {i.verdict} ({i.detail})")
    assert kill.at is not None and kill.on_worker >= 2 and kill.back_at is not None
    # The launcher's slots followed the nodes: the worker's share gone while it was away
    # (its node Down ~4 s after the kill), from what both held before (the control).
    assert kill.capacity is not None and kill.capacity[1] < kill.capacity[0], kill.capacity
    assert isinstance(swarm_runtime.SwarmRuntime, type) and issubclass(
        swarm_runtime.SwarmRuntime, VaryingCapacity)  # (so the launcher reads it)
    assert {i.name for i in invariants} == {
        "every case exactly once in the standing", "lost runs marked run_lost and run again",
        "nothing reported complete from partial output", "no run executed twice",
        "nothing left on the swarm"}
    assert all(i.held is True for i in invariants), invariants


async def test_the_chaos_invariants_catch_a_partial_output_and_a_second_execution(
        store: EventStore) -> None:
    """The negative controls of two invariants, without a swarm: a run recorded completed
    whose output lacks its last line, and a case whose earlier attempt ended otherwise than
    lost, are each BROKEN."""
    run_id = uuid.uuid4()
    sha = await store.put_blob(b"reviewing\n")  # the last line never came
    partial = await swarm_worker._whole_outputs(store, {run_id: [
        catalog.ContainerExited(run_id=run_id, exit_code=0, logs_sha256=sha,
                                duration_seconds=1.0),
        catalog.RunFinished(run_id=run_id, status="completed")]})
    assert partial.held is False
    whole_sha = await store.put_blob(f"reviewing\n{swarm_worker.LAST_LINE}\n".encode())
    whole = await swarm_worker._whole_outputs(store, {run_id: [
        catalog.ContainerExited(run_id=run_id, exit_code=0, logs_sha256=whole_sha,
                                duration_seconds=1.0),
        catalog.RunFinished(run_id=run_id, status="completed")]})
    assert whole.held is True
    first, second = uuid.uuid4(), uuid.uuid4()
    kill = swarm_worker.Kill(after_finished=3, at=5.0, on_worker=2, back_at=12.0)
    completed_twice = swarm_worker._lost_and_run_again(
        {"case": [first, second]},
        {first: [catalog.RunFinished(run_id=first, status="completed")], second: []}, kill)
    assert completed_twice.held is False
    lost = catalog.Failure(phase="report", category="run_lost", retryable=True)
    marked = swarm_worker._lost_and_run_again(
        {"case": [first, second]},
        {first: [catalog.RunFinished(run_id=first, status="failed", failure=lost)],
         second: []}, kill)
    assert marked.held is True


# -- capacity across nodes -----------------------------------------------------------------------

def _node(host: str, state: str = "ready", availability: str = "active", cores: int = 2,
          memory_gb: float = 24) -> dict[str, object]:
    return {"ID": host, "Status": {"State": state}, "Spec": {"Availability": availability},
            "Description": {"Hostname": host, "Resources": {
                "NanoCPUs": cores * 10**9, "MemoryBytes": int(memory_gb * 2**30)}}}


def test_each_node_s_capacity_comes_from_its_own_resources() -> None:
    """A few runs per core, bounded by memory; a node down, drained or paused holds none."""
    nodes = [_node("big", cores=4), _node("small-memory", memory_gb=1),
             _node("down", state="down"), _node("drained", availability="drain")]
    by_node = swarm_runtime.capacity_by_node(nodes)
    assert by_node == {"big": 4 * swarm_runtime.RUNS_PER_CORE, "small-memory": 2,
                       "down": 0, "drained": 0}
    assert swarm_runtime._capacity_of(nodes) == sum(by_node.values())
    assert swarm_runtime._capacity_of([_node("down", state="down")]) == 1  # never zero


async def _running_per_node(rt: SwarmRuntime, seen: list[collections.Counter[str]]) -> None:
    """Until cancelled: how many of props' job tasks run on each node, every 0.2 s."""
    hosts = {n["ID"]: n["Description"]["Hostname"] for n in await rt.docker.nodes.list()}
    while True:
        ours = {s["ID"] for s in await rt.docker.services.list(filters={"label": [LABEL]})}
        now = collections.Counter(
            hosts.get(t.get("NodeID", ""), "?") for t in await rt.docker.tasks.list()
            if t["ServiceID"] in ours and t["Status"]["State"] in ("starting", "running"))
        seen.append(now)
        await anyio.sleep(0.2)


@pytest.mark.slow
async def test_the_evaluation_s_ceiling_holds_across_the_cluster(
        store: EventStore, swarm: rig.Rig, tmp_path: Path) -> None:  # noqa: F811
    """Two launchers on the swarm (as on two hosts, each its own manager connection and
    capacity far above the ceiling), an evaluation of 8 cases at max_concurrency 3: never
    more than 3 of its tasks run at once across both nodes, each node within its own
    capacity, and both nodes ran them. The control: the same sampler sees more than one
    task at once (the ceiling is reached, not merely never approached)."""
    ev = await _swarm_evaluation(store, swarm.image, "swarm-ceiling", epochs=4, at_once=3)
    seen: list[collections.Counter[str]] = []
    async with opened_swarm(swarm) as rt, opened_swarm(swarm) as other:
        capacity = swarm_runtime.capacity_by_node(await rt.docker.nodes.list())
        assert rt.capacity() == sum(capacity.values()) > ev.plan.max_concurrency
        second = Launcher(store, [other], tmp_path / "second", name="second-host")
        async with anyio.create_task_group() as tg:
            tg.start_soon(_running_per_node, rt, seen)
            tg.start_soon(ReactorHost(store, second, poll_interval=0.1).run)
            driven = await driver.serve_until_done(
                store, ev, [LocalRuntime(tmp_path / "local", trust_commands=True), rt],
                driver.Stops(wait=300), lambda line: None)
            tg.cancel_scope.cancel()
    standing = await evaluation_standing.of(store, ev, figures=False)
    assert driven.outcome == "complete" and standing.counts == {"scored": 8}
    most = max(sum(c.values()) for c in seen)
    print(f"\nat most {most} task(s) at once over {len(seen)} looks; per node at most "
          f"{ {h: max(c[h] for c in seen) for h in capacity} }; capacity {capacity}")
    assert 1 < most <= ev.plan.max_concurrency
    assert all(c[h] <= capacity[h] for c in seen for h in c)
    assert {h for c in seen for h in c} == {swarm.manager_host, swarm.worker_host}
    claimed = {r.event.launcher for c in ev.cases
               for r in await store.read_stream(f"run-{ev.run_id(c, 0)}")
               if isinstance(r.event, catalog.RunClaimed)}
    print(f"claimed by: {sorted(claimed)}")

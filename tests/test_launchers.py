"""Several launchers at once: each bound to its own engine and capacity, sharing the queue of
requested runs through the log. Each run is claimed by exactly one launcher and gets exactly
one container; capacities hold; a launcher killed for good has its runs taken over once its
lease runs out (adopted where the engine is shared, else failed with `launcher_lost`), and
none is run twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from props.core.domain import caps, catalog, streams
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.reactors.host import ReactorHost
from props.reactors.launcher import launchers
from props.reactors.launcher.launcher import Launcher
from props.reactors.launcher.run_state import fold_run
from props.reactors.runtimes.container_runtime import ContainerRuntime, EngineUnreachable
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.conftest import once_per_ci
from tests.reactor_helpers import eventually, finished, push_code, request, sync_samples

CLI = [sys.executable, "-m", "props.tools.cli"]
WAIT = "import time; time.sleep({seconds})"  # a critic that waits, as an LLM-bound one does


def most_at_once(spans: Iterable[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one time."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans],
                   key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_most_at_once_counts_overlaps() -> None:
    t = [datetime(2026, 1, 1, 0, 0, s) for s in range(6)]
    assert most_at_once([(t[0], t[2]), (t[1], t[3]), (t[2], t[4])]) == 2  # ends before starts
    assert most_at_once([(t[0], t[5]), (t[1], t[2]), (t[3], t[4])]) == 2
    assert most_at_once([]) == 0


async def served_until_finished(store: EventStore, hosts: Sequence[ReactorHost],
                                run_ids: Sequence[uuid.UUID], seconds: float = 120,
                                ) -> dict[uuid.UUID, catalog.RunFinished]:
    """Serve `hosts` in this process until every run has finished."""
    async with anyio.create_task_group() as tg:
        for h in hosts:
            tg.start_soon(h.run)
        done = await finished(store, run_ids, seconds=seconds)
        tg.cancel_scope.cancel()
    return done


async def runs_by_launcher(store: EventStore, run_ids: Sequence[uuid.UUID],
                           ) -> dict[uuid.UUID, list[RecordedEvent]]:
    return {run_id: await store.read_stream(f"run-{run_id}") for run_id in run_ids}


def spans_of(events: dict[uuid.UUID, list[RecordedEvent]], launcher: str,
             ) -> list[tuple[datetime, datetime]]:
    """Each container's [started, exited] of the runs whose last claim is `launcher`'s."""
    spans = []
    for recs in events.values():
        claims = [r.event.launcher for r in recs if isinstance(r.event, catalog.RunClaimed)]
        started = [r.recorded_at for r in recs if isinstance(r.event, catalog.ContainerStarted)]
        exited = [r.recorded_at for r in recs if isinstance(r.event, catalog.ContainerExited)]
        if claims and claims[-1] == launcher and started and exited:
            spans.append((started[0], exited[0]))
    return spans


async def test_two_launchers_share_the_queue_each_run_once_within_capacity(
        store: EventStore, tmp_path: Path) -> None:
    await sync_samples(store)
    await push_code(store, "waits", WAIT.format(seconds=0.3))
    capacities = {"a": 2, "b": 3}
    engines: dict[str, ContainerRuntime] = {
        name: LocalRuntime(tmp_path / f"engine-{name}", trust_commands=True) for name in capacities}
    hosts = [ReactorHost(store, Launcher(store, [engines[name]], tmp_path / f"work-{name}",
                                         max_concurrent=capacity, name=name),
                         poll_interval=0.05)
             for name, capacity in capacities.items()]
    run_ids = await request(store, "waits", count=30)
    done = await served_until_finished(store, hosts, run_ids, seconds=120)
    assert {f.status for f in done.values()} == {"completed"}
    events = await runs_by_launcher(store, run_ids)
    for recs in events.values():
        types = [r.type_name for r in recs]
        assert types.count("run.claimed") == 1 and types.count("container.started") == 1
        assert types.index("run.claimed") < types.index("run.started")
    for name, capacity in capacities.items():
        spans = spans_of(events, name)
        assert spans, f"launcher {name} ran nothing"
        assert most_at_once(spans) <= capacity, name
    # The check can fail: the launchers did fill their slots.
    assert any(most_at_once(spans_of(events, n)) == c for n, c in capacities.items())
    states = {s.name: s for s in await launchers.status(store)}
    assert {n: (s.capacity, s.load, s.alive) for n, s in states.items()} == {
        "a": (2, 0, False), "b": (3, 0, False)}


async def test_a_claim_is_compare_and_set(store: EventStore, tmp_path: Path) -> None:
    """Two launchers claiming the same run at the same version: one claim is stored."""
    await sync_samples(store)
    [run_id] = await request(store, "nothing")
    from props.reactors.launcher.run_state import fold_run

    state = fold_run(await store.read_stream(f"run-{run_id}"))
    assert state is not None
    first = await launchers.claim(store, state, "a", None)
    stale = fold_run(await store.read_stream(f"run-{run_id}"))
    assert stale is not None and first is not None
    stale.claim, stale.version = None, first.version - 1  # as b read it, before a's claim
    assert await launchers.claim(store, stale, "b", None) is None  # b re-read: a's claim
    taken = await launchers.claim(store, first, "b", "a")  # a's lease ran out
    assert taken is not None and taken.claim == "b"
    claims = [r.event for r in await store.read_stream(f"run-{run_id}")
              if isinstance(r.event, catalog.RunClaimed)]
    assert [(c.launcher, c.takes_over) for c in claims] == [("a", None), ("b", "a")]


@pytest.mark.slow
async def test_a_launcher_killed_for_good_has_its_runs_taken_over(
        store: EventStore, tmp_path: Path) -> None:
    await sync_samples(store)
    await push_code(store, "waits", WAIT.format(seconds=1.5))
    procs, logs = {}, {}
    for name in ("a", "b"):
        logs[name] = tmp_path / f"{name}.log"
        env = {**os.environ, "PROPS_DSN": store.dsn, "PROPS_HOME": str(tmp_path / name)}
        with logs[name].open("wb") as sink:
            procs[name] = await anyio.open_process(
                [*CLI, "serve", "--only", "launcher", "--runtime", "local",
                 "--trust-local-commands",
                 "--launcher-name", name, "--capacity", "4", "--lease-seconds", "2"],
                env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        run_ids = await request(store, "waits", count=40, timeout_seconds=120)

        async def some_finished() -> bool:
            events = await runs_by_launcher(store, run_ids)
            return sum(any(r.type_name == "run.finished" for r in recs)
                       for recs in events.values()) >= 8
        await eventually(some_finished, seconds=120)
        procs["a"].send_signal(signal.SIGKILL)  # for good: its lease runs out
        await procs["a"].wait()
        done = await finished(store, run_ids, seconds=240)
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with anyio.fail_after(30):
                    await proc.wait()
    events = await runs_by_launcher(store, run_ids)
    taken = lost = 0
    for run_id, recs in events.items():
        types = [r.type_name for r in recs]
        assert types.count("container.started") <= 1, types  # never a second container
        claims = [r.event for r in recs if isinstance(r.event, catalog.RunClaimed)]
        if any(c.takes_over == "a" for c in claims):
            taken += 1
        f = done[run_id]
        if f.status == "failed":
            assert f.failure is not None and f.failure.category == "launcher_lost", f
            assert claims[-1].launcher == "b" and claims[-1].takes_over == "a"
            lost += 1
        else:
            assert f.status == "completed", f
    assert taken >= 1, (logs["b"].read_text()[-3000:])
    assert lost <= 4  # only the runs whose containers were running on a's engine
    states = {s.name: s for s in await launchers.status(store)}
    assert states["a"].load == 0 and not states["a"].alive


@pytest.mark.docker
@once_per_ci
async def test_docker_and_podman_launchers_share_100_runs(
        store: EventStore, tmp_path: Path) -> None:
    """A launcher on Docker and one on Podman (its Docker-compatible API), each with its own
    capacity: every run one claim and one container, both engines used, capacities held."""
    from props.core.domain import definitions
    from props.reactors.runtimes import docker_runtime
    from tests.conftest import docker_or_skip, podman_or_skip

    await sync_samples(store)
    capacities = {"docker": 4, "podman": 3}
    async with docker_or_skip() as on_docker, podman_or_skip() as on_podman:
        definition = await docker_runtime.build_reference_image(on_docker)
        assert definition.image is not None
        await on_podman.import_image(definitions.reference_rootfs(), definition.image)
        await definitions.push(store, definition)
        engines = {"docker": on_docker, "podman": on_podman}
        hosts = [ReactorHost(store, Launcher(store, [engines[name]], tmp_path / name,
                                             max_concurrent=capacity, name=name),
                             poll_interval=0.05)
                 for name, capacity in capacities.items()]
        run_ids = await request(store, "reference", count=100, ref="docker", budget=0)
        done = await served_until_finished(store, hosts, run_ids, seconds=600)
    assert {f.status for f in done.values()} == {"completed"}, \
        {f.failure for f in done.values()}
    events = await runs_by_launcher(store, run_ids)
    for recs in events.values():
        types = [r.type_name for r in recs]
        assert types.count("run.claimed") == 1 and types.count("container.started") == 1
    for name, capacity in capacities.items():
        spans = spans_of(events, name)
        assert spans, f"the {name} launcher ran nothing"
        assert most_at_once(spans) <= capacity, name
    assert sum(len(spans_of(events, n)) for n in capacities) == 100


def tcp_address(dsn: str) -> tuple[str, int]:
    """The test server's TCP address, or a skip: the embedded server takes sockets only."""
    from props.core.log import database

    _, authority, _, query = database.url_parts(dsn)
    host = authority.rpartition("@")[2]
    if not host or "host=" in query:
        pytest.skip("the test database is reached through a Unix socket (the embedded "
                    "server): agents over TCP need PROPS_TEST_DSN on a TCP server")
    name, _, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "5432")
    return name, int(port or 5432)


@pytest.mark.docker
async def test_agents_reach_the_database_over_tcp_as_their_run_role(
        store: EventStore, tmp_path: Path) -> None:
    """A launcher not on the database's host: the agent connects over TCP as its run's own
    role (no socket mounted) from the network it is given; without a way to the database
    (network none) the same run cannot report; and over TCP the role may read nothing."""
    import psycopg

    from props.core.domain import definitions
    from props.reactors.launcher import agent_roles
    from props.reactors.launcher.run_specs import AgentDatabase
    from props.reactors.runtimes import docker_runtime
    from tests.conftest import docker_or_skip

    host, port = tcp_address(store.dsn)
    await sync_samples(store)
    async with docker_or_skip() as docker:
        await definitions.push(store, await docker_runtime.build_reference_image(docker))
        outcomes: dict[str, catalog.RunFinished] = {}
        issues: dict[str, int] = {}
        for name, network in (("remote", "host"), ("cut-off", "none")):
            launcher = Launcher(store, [docker], tmp_path / name, name=name,
                                agent_database=AgentDatabase(host, port, "prefer", network))
            [run_id] = await request(store, "reference", ref="docker", budget=0)
            outcomes[name] = (await served_until_finished(
                store, [ReactorHost(store, launcher, poll_interval=0.05)], [run_id]))[run_id]
            types = [r.type_name for r in await store.read_stream(f"run-{run_id}")]
            issues[name] = types.count("issue.reported")
    assert outcomes["remote"].status == "completed" and issues["remote"] > 0
    assert outcomes["cut-off"].status == "failed" and issues["cut-off"] == 0
    [run_id] = await request(store, "reference")
    credentials = await agent_roles.create(store, run_id, caps.Caps())
    dsn = agent_roles.agent_dsn(store.dsn, credentials.role, credentials.password,
                                tcp=(host, port, "prefer"))
    try:
        with psycopg.connect(dsn) as conn:
            assert conn.info.host == host  # over TCP, not a socket
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM props.events")
    finally:
        await agent_roles.drop(store, run_id)


@pytest.mark.docker
async def test_a_podman_launcher_never_claims_a_run_it_cannot_launch(
        store: EventStore, tmp_path: Path) -> None:
    """Issue 55: the Podman launcher claimed runs whose image only Docker's engine holds and
    failed them as `launch: props_error`, saying nothing. Now it leaves them to the Docker
    launcher alive beside it (it never claims one), and alone it fails them naming why
    (`image_missing`; the control: the same run and launcher, nobody else alive)."""
    from props.core.domain import definitions
    from props.reactors.runtimes import docker_runtime
    from tests.conftest import docker_or_skip, podman_or_skip

    await sync_samples(store)
    only_docker = f"props-only-on-docker:{uuid.uuid4().hex[:12]}"
    async with docker_or_skip() as on_docker, podman_or_skip() as on_podman:
        reference = await docker_runtime.build_reference_image(on_docker)
        await on_docker.import_image(definitions.reference_rootfs(), only_docker)
        try:
            await definitions.push(store, reference.model_copy(
                update={"name": "docker-only", "image": only_docker}))

            def host(name: str, engine: ContainerRuntime) -> ReactorHost:
                return ReactorHost(store, Launcher(store, [engine], tmp_path / name,
                                                   name=name), poll_interval=0.05)

            alone = await request(store, "docker-only", ref="docker", budget=0)
            done = await served_until_finished(store, [host("podman", on_podman)], alone)
            failure = done[alone[0]].failure
            assert failure is not None and (failure.phase, failure.category) == (
                "launch", "image_missing")
            run_ids = await request(store, "docker-only", count=4, ref="docker", budget=0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(host("docker", on_docker).run)
                await eventually(lambda: _alive(store, "docker"))
                tg.start_soon(host("podman", on_podman).run)
                done = await finished(store, run_ids, seconds=300)
                tg.cancel_scope.cancel()
        finally:
            await on_docker.docker.images.delete(only_docker, force=True)
    assert {f.status for f in done.values()} == {"completed"}, \
        {f.failure for f in done.values()}
    claims = [r.event.launcher for recs in (await runs_by_launcher(store, run_ids)).values()
              for r in recs if isinstance(r.event, catalog.RunClaimed)]
    assert claims == ["docker"] * 4


async def _alive(store: EventStore, name: str) -> bool:
    return any(s.alive for s in await launchers.status(store) if s.name == name)


async def test_a_run_given_back_and_claimed_meanwhile_is_not_failed_by_the_launcher_that_gave_it(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Launcher `a` gave a run back (its engine away) and, its engine wait over, fails it as
    engine_unreachable; launcher `b` claims it between a's read of the run and a's append
    (chaos seed 10, 12-07: the run failed engine_unreachable while b, whose engine answers,
    held it). a's failure is not recorded: the run stays b's. The control: nobody claims
    the other run meanwhile, and a's failure of it is recorded."""
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    await push_code(store, "quick", WAIT.format(seconds=0))
    raced, control = await request(store, "quick", count=2)
    a = Launcher(store, [LocalRuntime(tmp_path / "a", trust_commands=True)], tmp_path / "wa",
                 name="a")
    for run_id in (raced, control):
        given = fold_run(await store.read_stream(streams.run(run_id)))
        assert given is not None and await launchers.claim(store, given, "a", None)
        assert await launchers.release(store, run_id, "a")

    reading = store.read_stream
    b_claimed: list[object] = []

    async def read_then_b_claims(stream_id: str) -> list[RecordedEvent]:
        records = await reading(stream_id)
        if stream_id == streams.run(raced) and not b_claimed:
            b_claimed.append(None)
            state = fold_run(records)
            assert state is not None
            b_claimed[0] = await launchers.claim(store, state, "b", None)
        return records

    monkeypatch.setattr(store, "read_stream", read_then_b_claims)
    for run_id in (raced, control):
        await a._fail_run(run_id, EngineUnreachable("gone"), category="engine_unreachable")
    monkeypatch.undo()
    assert b_claimed[0] is not None
    after = fold_run(await store.read_stream(streams.run(raced)))
    assert after is not None and (after.claim, after.finished) == ("b", False)
    failed = fold_run(await store.read_stream(streams.run(control)))
    assert failed is not None and failed.finished

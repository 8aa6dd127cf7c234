"""The container runtime contract (props.reactors.runtimes.runtime_contract), run on every bundled
runtime: local processes, Docker, and Podman through its Docker-compatible API; and what only
one of them promises.

Each case starts real processes or real containers, named uniquely for this test, and
removes them afterwards."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from props.core.domain import catalog, streams
from props.core.log.store import EventStore
from props.reactors.launcher import run_cleanup, run_specs
from props.reactors.launcher.run_specs import container_name
from props.reactors.runtimes import docker_runtime, local_runtime
from props.reactors.runtimes.container_runtime import ContainerRuntime, EngineUnreachable, Mount
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.reactors.runtimes.runtime_contract import FakeReach, Made, RuntimeContract
from tests.conftest import REFERENCE_IMAGE, docker_or_skip, podman_or_skip
from tests.reactor_helpers import request


class TestLocalRuntime(RuntimeContract):
    isolates_files = False  # a process group and a memory limit, no more

    @asynccontextmanager
    async def _local(self, tmp_path: Path) -> AsyncIterator[ContainerRuntime]:
        yield LocalRuntime(tmp_path / "containers", trust_commands=True)

    def make_runtime(self, tmp_path: Path) -> AbstractAsyncContextManager[ContainerRuntime]:
        return self._local(tmp_path)


@pytest.mark.docker
class TestDockerRuntime(RuntimeContract):
    image = REFERENCE_IMAGE
    mount_host_python = True  # the reference image is a rootfs without Python

    def make_runtime(self, tmp_path: Path) -> AbstractAsyncContextManager[ContainerRuntime]:
        return docker_or_skip()


@pytest.mark.docker
class TestPodmanRuntime(RuntimeContract):
    image = REFERENCE_IMAGE
    mount_host_python = True
    # Measured here: Podman 4.3 on cgroup v1 (cgroupfs) ends the container with the kernel's
    # SIGKILL (137) but reports OOMKilled false; the run fails as `killed`.
    oom_may_go_unreported = True

    def make_runtime(self, tmp_path: Path) -> AbstractAsyncContextManager[ContainerRuntime]:
        return podman_or_skip()


@pytest.mark.docker
async def test_a_run_asks_the_docker_engine_nine_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """One container's life as the launcher drives it (start, wait, logs, remove) takes nine
    requests to the engine: the look-up before creating it (a restarted launcher adopts
    the container it made), create and start; the look-up, wait and inspect (the exit code
    and OOM flag); the inspect aiodocker makes for the log's framing and the log; the
    removal. It took twelve when each call looked the container up first and the start
    inspected it again."""
    async with docker_or_skip() as rt:
        assert isinstance(rt, DockerRuntime)
        asked: list[tuple[str, str]] = []
        query = rt.docker._do_query

        async def counted(path: object, method: str, *args: object, **kwargs: object) -> object:
            asked.append((method, str(path).split("/")[-1]))
            return await query(path, method, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(rt.docker, "_do_query", counted)
        made = Made(rt, REFERENCE_IMAGE, mount_host_python=True)
        spec = made.spec("print('hello')")
        try:
            await rt.start(spec)
            outcome = await rt.wait(spec.name, 60)
            assert outcome is not None and outcome.exit_code == 0
            assert b"hello" in await rt.logs(spec.name)
            await rt.remove(spec.name)
            lifecycle = list(asked)
        finally:
            await made.cleanup()  # (a removal of its own, not counted)
        assert lifecycle == [("GET", "json"), ("POST", "create"), ("POST", "start"),
                             ("GET", "json"), ("POST", "wait"), ("GET", "json"),
                             ("GET", "json"), ("GET", "logs"), ("DELETE", spec.name)], lifecycle
        assert spec.name not in await rt.names()


@pytest.mark.docker
async def test_docker_containers_have_no_network_unless_asked(docker: DockerRuntime,
                                                              tmp_path: Path) -> None:
    m = Made(docker, REFERENCE_IMAGE, mount_host_python=True)
    try:
        code = ("import socket; print(sorted({i[1] for i in socket.if_nameindex()}))")
        spec = m.spec(code)
        await docker.start(spec)
        await docker.wait(spec.name, 60)
        assert (await docker.logs(spec.name)).strip() == b"['lo']"
    finally:
        await m.cleanup()


async def test_a_claim_whose_launcher_died_before_the_spawn_is_launched_again(
        tmp_path: Path) -> None:
    """A launcher SIGKILLed between claiming a local container and spawning its shim leaves
    a claim and nothing else: the next start launches it (it never ran), and only a claim
    younger than LOST_AFTER is taken for a spawn in progress."""
    rt = LocalRuntime(tmp_path / "containers", trust_commands=True)
    m = Made(rt, "", mount_host_python=False)
    try:
        spec = m.spec("print('ran')")
        claim = rt.root / spec.name / "claimed"
        claim.parent.mkdir(parents=True)
        claim.touch()
        await rt.start(spec)  # a fresh claim: somebody is spawning it, adopt
        assert await rt.wait(spec.name, 0.3) is None
        old = time.time() - local_runtime.LOST_AFTER - 1
        os.utime(claim, (old, old))
        await rt.start(spec)
        outcome = await rt.wait(spec.name, 60)
        assert outcome is not None and outcome.exit_code == 0
        assert b"ran" in await rt.logs(spec.name)
    finally:
        await m.cleanup()


class _TcpReach(FakeReach):
    def tcp(self) -> tuple[str, str] | None:
        return "postgresql://run-role@db.example:5432/db", "agents"


async def test_docker_prepare_picks_the_way_to_the_database(tmp_path: Path) -> None:
    """The branches the launcher's spec once held, now the Docker runtime's own (no engine
    is asked: prepare only shapes the spec): with network, the host's DSN; without, the
    operator's TCP address on its engine network, else the server's socket file mounted."""
    rt = DockerRuntime(None)  # type: ignore[arg-type]
    socket = tmp_path / ".s.PGSQL.5432"
    spec = Made(rt, REFERENCE_IMAGE, mount_host_python=False).spec("print('x')")
    online = await rt.prepare(dataclasses.replace(spec, network=True), tmp_path,
                              FakeReach(socket))
    assert online.env["PROPS_AGENT_DSN"] == FakeReach(socket).host_dsn()
    assert online.mounts == spec.mounts and online.network_name is None
    over_tcp = await rt.prepare(spec, tmp_path, _TcpReach(socket))
    assert (over_tcp.env["PROPS_AGENT_DSN"], over_tcp.network, over_tcp.network_name) == \
        ("postgresql://run-role@db.example:5432/db", True, "agents")
    offline = await rt.prepare(spec, tmp_path, FakeReach(socket))
    assert not offline.network and offline.env["PROPS_AGENT_DSN"].endswith(
        "host=" + docker_runtime.SOCKET_TARGET)
    assert offline.mounts == [*spec.mounts, Mount(str(socket),
                                                  f"{docker_runtime.SOCKET_TARGET}/{socket.name}")]


async def test_local_prepare_reaches_the_database_as_the_host(tmp_path: Path) -> None:
    rt = LocalRuntime(tmp_path / "containers", trust_commands=True)
    spec = Made(rt, "", mount_host_python=False).spec("print('x')")
    prepared = await rt.prepare(spec, tmp_path / "run", FakeReach(tmp_path / "s"))
    assert prepared.env["PROPS_AGENT_DSN"] == FakeReach(tmp_path / "s").host_dsn()
    assert prepared.env["HOME"] == str(tmp_path / "run") and prepared.mounts == spec.mounts


async def test_one_container_that_will_not_go_keeps_no_other_orphan(store: EventStore) -> None:
    """The sweep's reaping of finished runs' containers: one whose removal fails (an engine
    that will not remove it just now) is tried again at the next sweep, and the others go
    now. (One failure ended the whole round, whatever came after it in the engine's list.)"""
    deployment = await run_specs.deployment_of(store)
    stuck, other = await request(store, "reference", count=2)
    for run_id in (stuck, other):
        await store.append(streams.run(run_id), [catalog.RunFinished(run_id=run_id,
                                                                     status="completed")])

    left = {container_name(deployment, r): deployment for r in (stuck, other)}

    class Engine:  # the two calls reap_orphans makes of a ContainerRuntime
        kind = "docker"

        async def names(self, label: str) -> dict[str, str]:
            return dict(left)

        async def remove(self, name: str) -> None:
            if name == container_name(deployment, stuck):
                raise EngineUnreachable("the container engine failed on its side (500)")
            left.pop(name)

    await run_cleanup.reap_orphans(store, [Engine()], deployment)  # type: ignore[list-item]
    assert left == {container_name(deployment, stuck): deployment}

"""The container runtime contract, run on every runtime: local processes, Docker, and
Podman through its Docker-compatible API.

Each case starts real processes or real containers, named uniquely for this test, and
removes them afterwards."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from props.core.domain import definitions
from props.reactors import local_runtime
from props.reactors.containers import LABEL, ContainerRuntime, ContainerSpec, Mount
from props.reactors.docker_runtime import DockerRuntime
from props.reactors.local_runtime import LocalRuntime
from tests.conftest import REFERENCE_IMAGE, docker_or_skip, podman_or_skip


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker),
                        pytest.param("podman", marks=pytest.mark.docker)])
async def runtime(request: pytest.FixtureRequest, tmp_path: Path,
                  ) -> AsyncIterator[tuple[ContainerRuntime, str]]:
    if request.param == "local":
        yield LocalRuntime(tmp_path / "containers", trust_commands=True), ""
        return
    engine = docker_or_skip() if request.param == "docker" else podman_or_skip()
    async with engine as rt:
        yield rt, REFERENCE_IMAGE


class Made:
    """Specs for this test, each named uniquely and removed at the end."""

    def __init__(self, rt: ContainerRuntime, image: str, tmp: Path) -> None:
        self.rt, self.image, self.tmp = rt, image, tmp
        self.names: list[str] = []
        self.tag = uuid.uuid4().hex[:8]

    def spec(self, code: str, *, memory_mb: int = 256, network: bool = False,
             mounts: list[Mount] | None = None) -> ContainerSpec:
        name = f"props-test-{self.tag}-{len(self.names)}"
        self.names.append(name)
        python = [Mount(p, p) for p in definitions.host_python_paths()] \
            if self.rt.kind == "docker" else []
        return ContainerSpec(name=name, image=self.image,
                             command=[sys.executable, "-c", code],
                             env={"GREETING": "hello"}, mounts=python + (mounts or []),
                             labels={LABEL: str(uuid.uuid4()), "props.test": self.tag},
                             network=network, memory_mb=memory_mb)

    async def cleanup(self) -> None:
        for name in self.names:
            await self.rt.remove(name)


@pytest.fixture
async def made(runtime: tuple[ContainerRuntime, str], tmp_path: Path) -> AsyncIterator[Made]:
    m = Made(runtime[0], runtime[1], tmp_path)
    yield m
    await m.cleanup()


async def test_runs_to_its_exit_code_with_env_and_logs(made: Made) -> None:
    spec = made.spec("import os, sys; print(os.environ['GREETING']); sys.exit(3)")
    await made.rt.start(spec)
    outcome = await made.rt.wait(spec.name, 60)
    assert outcome is not None and outcome.exit_code == 3 and not outcome.oom_killed
    assert b"hello" in await made.rt.logs(spec.name)


async def test_a_second_start_adopts_the_container(made: Made, tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    marker.mkdir()
    marker.chmod(0o777)  # agents in containers run as an unprivileged uid
    spec = made.spec("import os, time, uuid; "
                     f"open('{marker}/' + uuid.uuid4().hex, 'w').close(); time.sleep(1)",
                     mounts=[Mount(str(marker), str(marker), read_only=False)])
    first = await made.rt.start(spec)
    second = await made.rt.start(spec)  # a restarted launcher asking again
    assert first == second
    outcome = await made.rt.wait(spec.name, 60)
    assert outcome is not None and outcome.exit_code == 0
    assert len(list(marker.iterdir())) == 1  # it ran once


async def test_wait_times_out_then_kill_ends_it(made: Made) -> None:
    spec = made.spec("import time; time.sleep(60)")
    await made.rt.start(spec)
    assert await made.rt.wait(spec.name, 0.5) is None
    await made.rt.kill(spec.name)
    outcome = await made.rt.wait(spec.name, 30)
    assert outcome is not None and outcome.exit_code is None  # killed: no code of its own


async def test_two_removals_of_one_container_both_succeed(made: Made) -> None:
    """A cancel and the run's own clean-up may remove the same container at once: Docker
    answers the second one 409 (removal already in progress), which is the same effect, not
    a launcher defect (the demo's 18th case failed so on a loaded machine)."""
    spec = made.spec("import time; time.sleep(60)")
    await made.rt.start(spec)
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(made.rt.remove, spec.name)
    assert await made.rt.logs(spec.name) == b""
    assert spec.name not in await made.rt.names()


async def test_memory_limit_is_enforced_and_reported(made: Made,
                                                     request: pytest.FixtureRequest) -> None:
    spec = made.spec("b = bytearray(400 * 1024 * 1024); print(len(b))", memory_mb=128)
    await made.rt.start(spec)
    outcome = await made.rt.wait(spec.name, 60)
    assert outcome is not None and outcome.exit_code != 0
    if request.node.callspec.params["runtime"] == "podman" and not outcome.oom_killed:
        # Measured here: Podman 4.3 on cgroup v1 (cgroupfs) ends the container with the
        # kernel's SIGKILL (137) but reports OOMKilled false; the run fails as `killed`.
        assert outcome.exit_code is None  # the limit held: the allocation was killed
        pytest.xfail("Podman 4.3 on cgroup v1 does not report OOMKilled (killed, exit 137)")
    assert outcome.oom_killed


async def test_labelled_containers_are_listed_and_removed(made: Made) -> None:
    spec = made.spec("print('x')")
    await made.rt.start(spec)
    await made.rt.wait(spec.name, 60)
    mine = {n: v for n, v in (await made.rt.names("props.test")).items()
            if v == made.tag}
    assert list(mine) == [spec.name]
    await made.rt.remove(spec.name)
    assert spec.name not in await made.rt.names("props.test")
    await made.rt.remove(spec.name)  # removing twice is a no-op
    await made.rt.kill(spec.name)  # so is killing what is gone


async def test_mounts_are_read_only(made: Made, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f.txt").write_text("content")
    target = made.rt.visible_path(Mount(str(data), "/example"))
    spec = made.spec(f"print(open('{target}/f.txt').read()); open('{target}/g', 'w')",
                     mounts=[Mount(str(data), "/example")])
    await made.rt.start(spec)
    outcome = await made.rt.wait(spec.name, 60)
    logs = await made.rt.logs(spec.name)
    assert b"content" in logs
    if made.rt.kind == "docker":  # the local runtime does not isolate files
        assert outcome is not None and outcome.exit_code != 0
        assert b"Read-only file system" in logs


@pytest.mark.docker
async def test_docker_containers_have_no_network_unless_asked(docker: DockerRuntime,
                                                              tmp_path: Path) -> None:
    m = Made(docker, REFERENCE_IMAGE, tmp_path)
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
    m = Made(rt, "", tmp_path)
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

"""A Docker engine of the chaos run's own, which the fault restart-docker stops and starts.

Restarting the machine's dockerd took the engine away from everything else using it for a
few seconds: a test suite running beside the chaos run saw no engine, and its `props demo`
fell back to local processes (another digest, so a new evaluation version). The run now
starts a dockerd of its own (its data root, exec root and socket under the run's home, no
bridge, no iptables, as .ci/run starts the machine's), points every process of the run at it
through DOCKER_HOST, restarts that one, and stops it at the end. The machine's engine is
never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc

from props.core.log import errors, retries, stopping
from props.reactors.runtimes import docker_runtime

STOP_WAIT = 60.0  # seconds a stopped dockerd has to exit (it stops its containers first)


class OwnEngine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.log = root / "dockerd.log"
        self.argv = ["dockerd", "--iptables=false", "--bridge=none",
                     "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                     "--pidfile", str(root / "dockerd.pid"), "--host", self.url]
        self.process: anyio.abc.Process | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    async def start(self) -> None:
        log = await anyio.to_thread.run_sync(lambda: open(self.log, "ab"))
        try:
            self.process = await anyio.open_process(self.argv, stdout=log, stderr=log, cwd="/",
                                                    start_new_session=True)
        finally:
            log.close()
        # A minute at most, as the driver waits for a restarting database (DRIVER).
        await retries.DRIVER.call(self._answers, retries.of_kinds(_NotYet))

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            await terminate(self.process, STOP_WAIT)

    async def restart(self) -> str:
        await self.stop()
        await self.start()
        return "dockerd stopped and started (the run's own engine)"

    async def _answers(self) -> None:
        if self.process is not None and self.process.returncode is not None:
            raise errors.PropsError(f"dockerd exited with {self.process.returncode}; its log: "
                                    f"{self.log}")
        if not await docker_runtime.reachable(self.url):
            raise _NotYet("the run's own Docker engine is not answering yet")


class _NotYet(Exception):
    """The engine started and does not answer yet."""


async def terminate(proc: anyio.abc.Process, wait: float) -> None:
    """SIGTERM, `wait` seconds to stop, then SIGKILL."""
    proc.send_signal(signal.SIGTERM)
    with anyio.move_on_after(wait):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def can_start() -> str | None:
    """None when this process can start a dockerd of its own, else why not."""
    if shutil.which("dockerd") is None:
        return "no dockerd installed"
    if os.geteuid() != 0:
        return "dockerd needs root"
    return None


@asynccontextmanager
async def own_engine(home: Path) -> AsyncIterator[OwnEngine]:
    """A dockerd under `home`, answering, and DOCKER_HOST naming it in this process (so the
    replicas and launchers it starts inherit it) until the block ends; then stopped."""
    engine = OwnEngine(home / "engine")
    engine.root.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("DOCKER_HOST")
    try:
        await engine.start()
        os.environ["DOCKER_HOST"] = engine.url
        yield engine
    finally:
        with stopping.shield("chaos: stopping the run's own Docker engine"):
            await engine.stop()
        if before is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = before

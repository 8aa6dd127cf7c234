"""Everything `props serve` runs, in one process: the reactors and the projection runner.

The container runtime is Docker when an engine answers (DOCKER_HOST or the local socket),
else local processes, unless the caller chooses. Several `props serve` processes can share a
database: each reactor and the projection runner is active in one of them at a time (advisory
locks), the others stand by and take over when the active one stops or dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Literal

import anyio
import anyio.abc

from props.core.domain.vocabulary import SERVICES
from props.core.log import embedded, errors
from props.core.log.stopping import Stop
from props.core.log.store import EventStore
from props.projections import engine
from props.reactors import docker_runtime, launchers, run_attempts
from props.reactors.containers import ContainerRuntime
from props.reactors.evaluations import EvaluationDriver
from props.reactors.grader import Grader
from props.reactors.host import Reactor, ReactorHost
from props.reactors.launcher import Launcher
from props.reactors.local_runtime import LocalRuntime
from props.reactors.run_environment import AgentEnvironment
from props.reactors.run_specs import AgentDatabase
from props.reactors.supervisor import Supervisor

log = logging.getLogger(__name__)

RuntimeChoice = Literal["auto", "docker", "local"]  # local: no Docker even if reachable


def work_dir() -> Path:
    return embedded.default_home() / "runs"


@contextlib.asynccontextmanager
async def container_runtimes(choice: RuntimeChoice = "auto", engine: str | None = None,
                             *, trust_local_commands: bool = False,
                             ) -> AsyncIterator[list[ContainerRuntime]]:
    """The runtimes runs may use: local processes (for local definitions) always, and a
    Docker-compatible engine (Docker, or Podman's API service) at `engine` (default
    DOCKER_HOST, else the local socket) for image definitions, when `choice` demands one (it
    must answer now), or with `auto` when this machine has one configured or `engine` is
    given: an engine restarting at this moment is waited for by the runs that need it, not
    given up on. The local runtime runs only props' own agents unless
    `trust_local_commands` (an operator who wrote the local definitions' commands)."""
    local = LocalRuntime(work_dir() / "local-containers", trust_commands=trust_local_commands)
    if choice == "docker":
        async with docker_runtime.DockerRuntime.connect(engine) as docker:
            yield [local, docker]
    elif choice == "auto" and (engine is not None or await docker_runtime.reachable()
                               or docker_runtime.configured()):
        async with docker_runtime.DockerRuntime.lazy(engine) as docker:
            yield [local, docker]
    else:
        yield [local]


@dataclasses.dataclass
class Service:
    store: EventStore
    runtimes: Sequence[ContainerRuntime]
    only: Sequence[str] = SERVICES
    max_concurrent: int = 8
    launcher_name: str = launchers.DEFAULT_NAME
    engine_url: str | None = None  # the launcher's engine, as recorded (never secrets)
    lease_seconds: float = launchers.LEASE_SECONDS
    engine_wait: float = run_attempts.ENGINE_WAIT_SECONDS
    agent_database: AgentDatabase | None = None  # agents over TCP (not on the DB's host)
    agent_env: AgentEnvironment | None = None  # what of this environment runs may be given
    poll_interval: float = 1.0
    stop: Stop = dataclasses.field(default_factory=Stop)  # its deadline, and what it left
    hosts: list[ReactorHost] = dataclasses.field(default_factory=list)
    runner: engine.Runner | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.only) - set(SERVICES))
        if unknown:
            raise errors.PropsError(f"unknown service(s) {', '.join(unknown)}; known: "
                                    f"{', '.join(SERVICES)}")
        reactors: list[Reactor] = []
        if "launcher" in self.only:
            reactors.append(Launcher(self.store, self.runtimes, work_dir(),
                                     max_concurrent=self.max_concurrent,
                                     name=self.launcher_name, engine=self.engine_url,
                                     lease_seconds=self.lease_seconds,
                                     agent_database=self.agent_database,
                                     agent_env=self.agent_env,
                                     engine_wait=self.engine_wait, stop=self.stop))
        if "grader" in self.only:
            reactors.append(Grader(self.store))
        if "supervisor" in self.only:
            reactors.append(Supervisor(self.store))
        if "evaluations" in self.only:
            reactors.append(EvaluationDriver(self.store))
        self.hosts = [ReactorHost(self.store, r, poll_interval=self.poll_interval,
                                  stop=self.stop) for r in reactors]
        if "projections" in self.only:
            self.runner = engine.Runner(self.store, poll_interval=self.poll_interval,
                                       stop=self.stop)

    async def standing(self) -> tuple[list[str], list[str]]:
        """Once each part's first try for its lock is answered: the parts this process
        serves, and those it stands by for (another instance is active)."""
        parts = [(h.reactor.name if h.reactor.name in SERVICES else "launcher", h.standing)
                 for h in self.hosts]
        if self.runner is not None:
            parts.append(("projections", self.runner.standing))
        for _name, standing in parts:
            await standing.settled.wait()
        return ([n for n, s in parts if s.leading], [n for n, s in parts if not s.leading])

    async def run(self) -> None:
        """Serve until cancelled (each part finishes the event or batch in hand)."""
        async with anyio.create_task_group() as tg:
            for host in self.hosts:
                tg.start_soon(host.run, name=f"props-reactor-{host.reactor.name}")
            if self.runner is not None:
                tg.start_soon(self.runner.run, name="props-projection-runner")


async def cancel_on_signal(scope: anyio.CancelScope, say: str, *, stop: Stop | None = None,
                           task_status: anyio.abc.TaskStatus[None]) -> None:
    """Cancel `scope` on SIGTERM or SIGINT: a service's graceful stop, since what must finish
    is shielded (until `stop`'s deadline, when one is given)."""
    import signal

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            log.warning(say + (f" (at most {stop.seconds:g} s)" if stop else ""))
            if stop is not None:
                stop.begin()
            scope.cancel()
            return

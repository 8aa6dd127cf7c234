"""Everything `props serve` runs, in one process: the reactors and the projection runner.

The container runtimes are local processes, and Docker when an engine answers (DOCKER_HOST or
the local socket), with any other registered runtime this machine has, unless the caller
chooses one by name (props.reactors.runtimes.runtime_registry). Several `props serve`
processes can share a database: each reactor and the projection runner is active in one of
them at a time (advisory locks), the others stand by and take over when the active one
stops or dies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import anyio.abc

from props.core.domain.quotas import Quotas
from props.core.domain.vocabulary import SERVICES
from props.core.log import embedded, errors
from props.core.log.stopping import Stop
from props.core.log.store import EventStore
from props.projections import engine
from props.reactors.evaluation_reactor import EvaluationDriver
from props.reactors.grader import Grader
from props.reactors.host import Reactor, ReactorHost
from props.reactors.launcher import launchers, run_attempts
from props.reactors.launcher.launcher import Launcher
from props.reactors.launcher.run_specs import AgentDatabase
from props.reactors.runtimes import runtime_registry
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.reactors.supervisor import Supervisor

log = logging.getLogger(__name__)

# "auto", or a registered runtime's name ("local": no engine even if one answers)
RuntimeChoice = str


def work_dir() -> Path:
    return embedded.default_home() / "runs"


@contextlib.asynccontextmanager
async def container_runtimes(choice: RuntimeChoice = runtime_registry.AUTO,
                             engine: str | None = None,
                             *, trust_local_commands: bool = False,
                             ) -> AsyncIterator[list[ContainerRuntime]]:
    """The runtimes runs may use (runtime_registry.chosen): local processes (for local definitions)
    always, the one `choice` names (it must answer now), or with `auto` every registered one
    this machine has. The local runtime runs only props' own agents unless
    `trust_local_commands` (an operator who wrote the local definitions' commands)."""
    options = runtime_registry.Options(work_dir(), engine, trust_local_commands)
    async with contextlib.AsyncExitStack() as stack:
        opened = [await stack.enter_async_context(registration.open(options, required))
                  for registration, required in runtime_registry.chosen(choice)]
        yield [rt for rt in opened if rt is not None]


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
    poll_interval: float = 1.0
    quotas: Quotas = dataclasses.field(default_factory=Quotas)  # each token's (the API's)
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
                                     engine_wait=self.engine_wait, stop=self.stop))
        if "grader" in self.only:
            reactors.append(Grader(self.store))
        if "supervisor" in self.only:
            reactors.append(Supervisor(self.store))
        if "evaluations" in self.only:
            reactors.append(EvaluationDriver(self.store, shares=self.quotas))
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

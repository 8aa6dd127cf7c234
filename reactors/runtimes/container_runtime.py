"""The container runtime contract: what the launcher needs from Docker or from local processes.

A container is known by a deterministic name (derived from the run id): `start` finds the
container of that name before it launches one, so a launcher restarted mid-run adopts the
running container instead of starting a second. `wait` returns once the container has exited
(or None at the deadline); `kill` stops it; `outcome` says how it ended and `logs` what it
printed; `remove` forgets it. `names` lists the containers carrying a label, so orphans left
by a crash are found and reaped at start-up. `prepare` gives a run's container its way to
the database, which only the runtime knows (a local process reaches it as the launcher does; a
container needs a socket mounted or a network). Every runtime passes the same contract tests
(props.reactors.runtimes.runtime_contract), and is found by its name
(props.reactors.runtimes.runtime_registry).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from props.core.log import errors

LABEL = "props.run"  # every props container carries it, valued with its run id
DEPLOYMENT_LABEL = "props.deployment"  # ... and this one, naming its database
MAX_LOG_BYTES = 1024 * 1024  # the tail kept of a container's output


class EngineUnreachable(errors.PropsError):
    """The container engine does not answer (gone, restarting, cut off mid-answer, past its
    deadline, or failing on its side). Transient for a while: a run waits for it up to the
    launcher's `engine_wait`, then fails as engine_unreachable (retryable). A runtime says
    every such error of its engine as this, so the retry rule (props.core.log.faults) needs
    to know no engine's exceptions."""

    exit_code = 69  # EX_UNAVAILABLE
    fault: errors.Fault = "transient"
    category = "engine_unreachable"


class EngineRefused(errors.PropsError):
    """The container engine answered and refused the request (a 4xx of its own): the same
    request is refused again. A runtime says every such answer of its engine as this."""

    fault: errors.Fault = "refusal"
    category = "engine_refused"


class RunLost(errors.PropsError):
    """A run's container was lost with its node (a cluster engine's node down past its
    grace, or its output cut short): removed, never reported complete, never started again.
    The run fails as run_lost, retryable: an evaluation runs the case again, as a new run."""

    category = "run_lost"


class StartCut(EngineRefused):
    """The engine keeps a start of this container that its own restart cut, and refuses
    every later start of it (dockerd 20.10: a 500, "task ... already exists", for ever).
    The container can only be removed (with whatever of it may be alive) and made again;
    the launcher does so only when the run's agent recorded nothing (never run twice)."""


@dataclasses.dataclass(frozen=True)
class Mount:
    host: str
    target: str  # where the container sees it; the local runtime sees `host` itself
    read_only: bool = True


@dataclasses.dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str  # an image reference or digest (docker); ignored by the local runtime
    command: list[str]
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    mounts: list[Mount] = dataclasses.field(default_factory=list)
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    network: bool = False
    network_name: str | None = None  # the engine network to join (network only)
    cpus: float = 1.0
    memory_mb: int = 512


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a container ended: `exit_code` None when it was killed by a signal or lost."""

    exit_code: int | None
    oom_killed: bool = False


class Reach(Protocol):
    """How a run's agent may reach the database, for its runtime to choose from: each way is
    a DSN of the run's own role, so every restriction of that role holds whichever it is."""

    def host_dsn(self) -> str:
        """A DSN that works from this host (the launcher's own address for the server)."""

    def tcp(self) -> tuple[str, str] | None:
        """A DSN over TCP and the engine network it is reached from, when the operator gave
        one (agents whose engine is not on the database's host); None otherwise."""

    async def socket(self, target: str) -> tuple[str, Mount]:
        """A DSN through the server's Unix socket seen at `target`, and the mount of that one
        socket file (never its directory: the embedded server keeps it in its data)."""


class ContainerRuntime(Protocol):
    # its registered name (props.reactors.runtimes.runtime_registry), recorded in
    # container.started
    kind: str

    async def prepare(self, spec: ContainerSpec, run_dir: Path, reach: Reach) -> ContainerSpec:
        """`spec` completed with the agent's way to the database (PROPS_AGENT_DSN and what
        it takes) and whatever else this runtime's containers need; `run_dir` is the run's
        own directory on this host."""

    async def start(self, spec: ContainerSpec) -> str:
        """Start the container named `spec.name`, or find it if it exists; return its id."""

    async def wait(self, name: str, within: float | None) -> Outcome | None:
        """The outcome once the container has exited; None if `within` seconds passed first."""

    async def kill(self, name: str) -> None:
        """Stop the container now (no-op if it has exited or does not exist)."""

    async def logs(self, name: str) -> bytes:
        """Its output so far (stdout and stderr), at most the last MAX_LOG_BYTES."""

    async def remove(self, name: str) -> None:
        """Forget the container (no-op if it does not exist)."""

    async def names(self, label: str = LABEL) -> dict[str, str]:
        """The containers carrying `label`, by name, with the label's value."""

    def visible_path(self, mount: Mount) -> str:
        """The path under which the container sees `mount`."""

    def capacity(self) -> int:
        """How many containers this host can run at once."""


@runtime_checkable
class VaryingCapacity(Protocol):
    """A runtime whose capacity changes while it serves (a cluster's nodes come and go): the
    launcher's slots follow `capacity_now()` at each grant, never above `capacity()`."""

    def capacity_now(self) -> int:
        """How many runs the engine's ready nodes hold just now (at least one)."""


@runtime_checkable
class HoldsImages(Protocol):
    """A runtime whose containers run images held by its engine (Docker, Podman): it can
    say, before a run is claimed, whether its engine has the image or can pull it."""

    async def has_image(self, image: str) -> bool:
        """Whether the engine holds `image`, or can pull it (a reference by digest)."""


async def holds(runtimes: Iterable[ContainerRuntime], name: str) -> bool:
    """Whether one of these engines has a container named `name` (running or not)."""
    for rt in runtimes:
        if name in await rt.names():
            return True
    return False


def host_capacity(memory_mb_each: int = 512) -> int:
    """What the host can hold: a container per core, bounded by memory."""
    cores = os.cpu_count() or 1
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        by_memory = max(1, pages // (memory_mb_each * 1024 * 1024))
    except (ValueError, OSError):
        by_memory = cores
    return int(max(1, min(cores * 4, by_memory)))

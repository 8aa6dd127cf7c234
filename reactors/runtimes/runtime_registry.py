"""Container runtimes by name: the bundled ones (local processes, a Docker-compatible engine)
and any that a package registers, by calling `register` or through the entry-point group
`props.runtimes`, so a new engine is added without an edit to props.

A runtime's name is what the log records (`container.started`, `launcher.started`, a
definition's `runtime`): it is checked here against the catalog's pattern, so what a
registration accepts an event can always carry. Adding a runtime is two files: the runtime
(a `ContainerRuntime` that passes props.reactors.runtimes.runtime_contract) and its registration (a
`Registration` named in the package's entry points). docs/howto/add-a-runtime.md.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from props.core.domain import catalog
from props.core.log import errors
from props.reactors.runtimes.container_runtime import ContainerRuntime

GROUP = "props.runtimes"  # the entry-point group third-party runtimes register in
AUTO = "auto"  # every registered runtime that this machine has; not a runtime's name
_NAME = re.compile(catalog.RUNTIME_NAME_PATTERN)


class UnknownRuntime(errors.ConfigurationError):
    """No runtime is registered under that name: the message lists those that are."""


class InvalidRuntime(errors.ConfigurationError):
    """A runtime's registration is refused (its name, or what its entry point gives)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What every runtime opened for `props serve` is told."""

    work_dir: Path  # the runs' directory on this host: a runtime keeps its state beneath
    engine: str | None = None  # an engine's address the operator gave (--engine)
    trust_local_commands: bool = False  # the operator wrote the local definitions' commands


# Opens the runtime for the service's lifetime. `required`: the operator chose it by name, so
# it must answer now (else raise); otherwise (`auto`) it yields None where this machine has
# none of its kind.
Opener = Callable[[Options, bool], AbstractAsyncContextManager[ContainerRuntime | None]]


@dataclasses.dataclass(frozen=True)
class Registration:
    name: str
    open: Opener


_registered: dict[str, Registration] = {}
_entry_points_loaded = False


def valid_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidRuntime(f"runtime name {name!r} is not a name: lowercase letters, digits, "
                             f"'-' and '_', starting with a letter, at most 32 characters")
    return name


def register(name: str, opener: Opener) -> Registration:
    """Register a runtime under `name` (once: a second, different one is refused)."""
    registration = Registration(valid_name(name), opener)
    held = _registered.get(name)
    if held is not None and held != registration:
        raise InvalidRuntime(f"a runtime named {name!r} is already registered")
    _registered[name] = registration
    return registration


def unregister(name: str) -> None:
    """Forget a runtime (a test's own, at its end); the bundled ones are refused."""
    if name in BUNDLED:
        raise InvalidRuntime(f"the bundled runtime {name!r} cannot be unregistered")
    _registered.pop(name, None)


def _load_entry_points() -> None:
    """The runtimes installed packages declare (`[project.entry-points."props.runtimes"]`,
    each naming a Registration), loaded once, when a name is first asked for."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in importlib.metadata.entry_points(group=GROUP):
        found = point.load()
        if not isinstance(found, Registration) or found.name != point.name:
            raise InvalidRuntime(f"entry point {point.name} = {point.value} of {GROUP} is "
                                 f"not a runtimes.Registration named {point.name!r}")
        register(found.name, found.open)


def names() -> list[str]:
    _load_entry_points()
    return sorted(_registered)


def get(name: str) -> Registration:
    _load_entry_points()
    found = _registered.get(name)
    if found is None:
        raise UnknownRuntime(f"no runtime named {name!r}; registered: {', '.join(names())} "
                             f"(a runtime registers under the entry-point group {GROUP})")
    return found


def chosen(choice: str) -> list[tuple[Registration, bool]]:
    """The runtimes a service opens for `choice`, each with whether it must answer: local
    processes always (props' own agents run there), and the one chosen by name; with `auto`
    every other registered one, where this machine has it."""
    if choice == AUTO:
        return [(get(n), False) for n in ["local", *(n for n in names() if n != "local")]]
    picked = get(choice)
    return [(picked, True)] if choice == "local" else [(get("local"), False), (picked, True)]


@asynccontextmanager
async def _open_local(options: Options, required: bool) -> AsyncIterator[ContainerRuntime]:
    from props.reactors.runtimes.local_runtime import LocalRuntime

    yield LocalRuntime(options.work_dir / "local-containers",
                       trust_commands=options.trust_local_commands)


@asynccontextmanager
async def _open_docker(options: Options,
                       required: bool) -> AsyncIterator[ContainerRuntime | None]:
    """Docker, or Podman's API service, at the given engine (default DOCKER_HOST, else the
    local socket). Chosen by name it must answer now; with `auto` it is opened when this
    machine has one configured or an engine is given: an engine restarting at this moment
    is waited for by the runs that need it, not given up on."""
    from props.reactors.runtimes import docker_runtime

    if required:
        async with docker_runtime.DockerRuntime.connect(options.engine) as docker:
            yield docker
    elif (options.engine is not None or docker_runtime.configured()
          or await docker_runtime.reachable()):
        async with docker_runtime.DockerRuntime.lazy(options.engine) as docker:
            yield docker
    else:
        yield None


@asynccontextmanager
async def _open_swarm(options: Options,
                      required: bool) -> AsyncIterator[ContainerRuntime | None]:
    """A Docker Swarm's manager: runs as jobs across its nodes (swarm_runtime; with
    `auto`, only where PROPS_SWARM_HOST names one)."""
    from props.reactors.runtimes import swarm_runtime

    async with swarm_runtime.opened(options.engine, required) as swarm:
        yield swarm


BUNDLED = ("docker", "local", "swarm")
register("local", _open_local)
register("docker", _open_docker)
register("swarm", _open_swarm)

"""Containers on a Docker engine, through aiodocker.

The container name is the identity: `start` inspects the name first and adopts what it finds
(starting it if it was created but never started), so a launcher restarted mid-run never
launches a second container for a run. No network unless the spec asks (`NetworkMode` none),
CPU and memory limits (swap included, so the memory limit is real), every container labelled.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import aiodocker
import aiohttp
import anyio
import orjson

from props.core.domain import baselines, catalog, definitions
from props.core.log import errors
from props.reactors.runtimes.container_runtime import (
    LABEL,
    MAX_LOG_BYTES,
    ContainerSpec,
    EngineRefused,
    EngineUnreachable,
    Mount,
    Outcome,
    Reach,
    StartCut,
    host_capacity,
)

DEFAULT_URL = "unix:///var/run/docker.sock"
SOCKET_TARGET = "/run/props-pg"  # where a container without network sees the server's socket
AGENT_USER = "65534:65534"  # nobody:nogroup


def engine_url() -> str:
    return os.environ.get("DOCKER_HOST", DEFAULT_URL)


async def holds_image(docker: aiodocker.Docker, ref: str, seconds: float) -> bool:
    """Whether the engine has the image `ref` itself (no pull), answered within `seconds`."""
    try:
        with anyio.fail_after(seconds):
            await docker.images.inspect(ref)
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def configured() -> bool:
    """Whether this machine means to have an engine, answering or not: DOCKER_HOST set, the
    socket there, or dockerd installed (its socket is gone while it restarts)."""
    url = engine_url()
    return ("DOCKER_HOST" in os.environ or os.path.exists(url.removeprefix("unix://"))
            or shutil.which("dockerd") is not None)


ANSWER_WAIT = 60.0  # seconds an engine that took the connection has to answer


async def reachable(url: str | None = None, *, within: float = ANSWER_WAIT) -> bool:
    """Whether a Docker engine answers at `url` (DOCKER_HOST, else the local socket). No
    socket, or a connection refused, is a no at once; an engine that took the connection is
    waited for to answer (a loaded one answers in seconds: a short guess called it absent),
    up to `within`."""
    url = url or engine_url()
    if url.startswith("unix://") and not await anyio.Path(url.removeprefix("unix://")).exists():
        return False
    try:
        with anyio.fail_after(within):
            async with aiodocker.Docker(url=url) as docker:
                await docker.version()
    except (aiodocker.DockerError, OSError, TimeoutError, ValueError):
        return False
    return True


def _config(spec: ContainerSpec) -> dict[str, Any]:
    memory = spec.memory_mb * 1024 * 1024
    return {
        "Image": spec.image,
        "Cmd": spec.command or None,
        "Env": [f"{k}={v}" for k, v in sorted(spec.env.items())],
        "Labels": spec.labels,
        # An unprivileged uid whatever the image says: nothing in the container runs as root.
        "User": AGENT_USER,
        "NetworkDisabled": not spec.network,
        "HostConfig": {
            "Binds": [f"{m.host}:{m.target}:{'ro' if m.read_only else 'rw'}"
                      for m in spec.mounts],
            "NetworkMode": (spec.network_name or "default") if spec.network else "none",
            "Memory": memory,
            "MemorySwap": memory,
            "NanoCpus": int(spec.cpus * 1e9),
            "PidsLimit": 256,
            # Explicit, and below any host's hard limits: Podman's defaults (a million open
            # files) are refused where the engine may not raise them.
            "Ulimits": [{"Name": "nofile", "Soft": 4096, "Hard": 4096},
                        {"Name": "nproc", "Soft": 4096, "Hard": 4096}],
            "ReadonlyRootfs": True,
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
        },
    }


F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])
T = TypeVar("T")
REMOVAL_WAIT = 60.0  # seconds a remove waits for another path's removal of the same container
# aiodocker's status for an engine it cannot connect to (no socket, refused, cut): nothing
# is removing anything there, so a remove fails at once instead of waiting REMOVAL_WAIT
# (a launcher whose engine was gone held a slot 60 s per finished run, local ones included,
# in its clean-up: chaos's doomed launcher stalled behind it).
NO_CONNECTION = 900
ENGINE_DEADLINE = ANSWER_WAIT  # seconds any one request to the engine has to answer
PULL_DEADLINE = 600.0  # ... and a pull of an image, which downloads it
# What an engine gone away raises through aiohttp: refused or cut connections, a body cut
# mid-answer (ClientPayloadError: `container.wait()` or the logs when the engine vanished
# while answering), a socket error, a deadline passed, a stream ended early.
_GONE: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError, TimeoutError, EOFError)


def engine_calls(engine: str, deadline: float | None = None) -> Callable[[F], F]:
    """A decorator saying every error of `engine` once, in the retry rule's words
    (props.core.log.faults): one that does not answer (no socket, a connection cut, a body
    cut mid-answer, past its deadline, a 5xx of its own) as EngineUnreachable, a refusal (a
    4xx) as EngineRefused; each call under `deadline` seconds when given. Nothing above the
    runtimes sees aiodocker's or aiohttp's exceptions (the Swarm runtime speaks through it
    too)."""
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                with anyio.fail_after(deadline if deadline is not None else math.inf):
                    return await fn(*args, **kwargs)
            except _GONE as exc:
                raise EngineUnreachable(f"{engine} does not answer "
                                        f"({type(exc).__name__})") from exc
            except aiodocker.DockerError as exc:
                if exc.status >= 500:
                    raise EngineUnreachable(f"{engine} failed on its side "
                                            f"({exc.status})") from exc
                raise EngineRefused(f"{engine} refused the request ({exc.status})") from exc

        return cast(F, call)
    return decorate


_engine_call = engine_calls("the container engine")


class DockerRuntime:
    kind: str = "docker"

    def __init__(self, docker: aiodocker.Docker, deadline: float = ENGINE_DEADLINE) -> None:
        self.docker = docker
        self.deadline = deadline  # seconds each request to the engine has to answer

    async def _answer(self, request: Awaitable[T], seconds: float | None = None) -> T:
        """`request`'s answer within `seconds` (the runtime's deadline): an engine that took
        the connection and never answers holds no run, nor its slot, for ever."""
        with anyio.fail_after(seconds if seconds is not None else self.deadline):
            return await request

    async def prepare(self, spec: ContainerSpec, run_dir: Path, reach: Reach) -> ContainerSpec:
        """A container with network reaches the database as the host does; one without, over
        the operator's TCP address on its engine network when given (its engine is not on
        the database's host), else through the server's socket file, mounted."""
        if spec.network:
            return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": reach.host_dsn()})
        if (tcp := reach.tcp()) is not None:
            dsn, network = tcp
            return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": dsn},
                                       network=True, network_name=network)
        dsn, socket = await reach.socket(SOCKET_TARGET)
        return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": dsn},
                                   mounts=[*spec.mounts, socket])

    @classmethod
    @asynccontextmanager
    async def lazy(cls, url: str | None = None, deadline: float = ENGINE_DEADLINE,
                   ) -> AsyncIterator[DockerRuntime]:
        """An engine that may be down just now (restarting): each call reaches for it, and a
        call while it is away fails with a connection error that callers retry."""
        async with aiodocker.Docker(url=url or engine_url(), api_version="v1.41") as docker:
            yield cls(docker, deadline)

    @classmethod
    @asynccontextmanager
    async def connect(cls, url: str | None = None) -> AsyncIterator[DockerRuntime]:
        url = url or engine_url()
        try:
            async with aiodocker.Docker(url=url) as docker:
                await docker.version()
                yield cls(docker)
        except (aiodocker.DockerError, OSError) as exc:
            raise errors.StoreUnavailable(
                f"cannot reach the Docker engine at {url} ({exc}): start dockerd, or set "
                f"DOCKER_HOST, or use the local runtime") from exc

    async def _find(self, name: str) -> Any | None:
        try:
            return await self._answer(self.docker.containers.get(name))
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise

    @_engine_call
    async def start(self, spec: ContainerSpec) -> str:
        container: Any = await self._find(spec.name)
        if container is None:
            try:
                container = await self._answer(
                    self.docker.containers.create(_config(spec), name=spec.name))
            except aiodocker.DockerError as exc:
                if exc.status == 409:  # another launcher created it a moment ago
                    return await self.start(spec)
                if exc.status == 404 and await self._pull(spec.image):
                    return await self.start(spec)
                if exc.status == 404:
                    raise errors.PropsError(
                        f"image {spec.image} is not on the Docker engine and could not be "
                        f"pulled: push the definition again (props definitions push, or "
                        f"docker push through props serve --registry)") from exc
                raise
            state = "created"  # (just made: no inspect needed to say so)
        else:
            state = container["State"]["Status"]  # (inspected by the look-up itself)
        if state == "created":
            try:
                await self._answer(container.start())
            except aiodocker.DockerError as exc:
                if exc.status >= 500 and "already exists" in str(exc.message):
                    raise StartCut(f"the engine refuses to start {spec.name}: a start of "
                                   f"it that its restart cut is still there ({exc.message})"
                                   ) from exc
                raise
        return str(container.id)

    @_engine_call
    async def has_image(self, image: str) -> bool:
        """Whether this engine holds `image`, or may pull it (recorded by registry and
        digest): a Podman engine beside Docker holds none of Docker's imported images."""
        if "@sha256:" in image:
            return True
        return await holds_image(self.docker, image, self.deadline)

    async def _pull(self, image: str) -> bool:
        """Pull an image recorded by registry and digest (`host/name@sha256:...`), as
        definitions pushed through the registry proxy are; False when it cannot be had."""
        if "@sha256:" not in image:
            return False
        try:
            await self._answer(self.docker.images.pull(image), PULL_DEADLINE)
        except aiodocker.DockerError:
            return False
        return True

    async def _outcome(self, container: Any) -> Outcome | None:
        state = (await self._answer(container.show()))["State"]
        if state["Status"] in ("created", "running", "restarting", "paused"):
            return None
        oom = bool(state.get("OOMKilled"))
        code = int(state.get("ExitCode", -1))
        # 137 = SIGKILL (our kill, or the kernel's OOM killer): no exit code of its own.
        return Outcome(exit_code=None if code == 137 else code, oom_killed=oom)

    @_engine_call
    async def wait(self, name: str, within: float | None) -> Outcome | None:
        container = await self._find(name)
        if container is None:
            raise errors.PropsError(f"no Docker container named {name}")
        with anyio.move_on_after(within):  # (its end not come by then: the outcome says so)
            await container.wait()
        return await self._outcome(container)

    def _named(self, name: str) -> Any:
        """A handle on the container `name` without asking the engine (an inspect each call
        would be one more request a run): a call on it answers 404 if there is none."""
        return self.docker.containers.container(name)

    @_engine_call
    async def kill(self, name: str) -> None:
        try:
            await self._answer(self._named(name).kill(signal="SIGKILL"))
        except aiodocker.DockerError as exc:
            if exc.status in (404, 409):  # gone, or not running
                return
            # Podman answers a container that has exited with a 500 ("can only kill running
            # containers"), not Docker's 409: the effect wanted holds unless it still runs.
            if exc.status == NO_CONNECTION or await self._running(name):
                raise

    async def _running(self, name: str) -> bool:
        container = await self._find(name)
        return container is not None and bool(container["State"].get("Running"))

    @_engine_call
    async def logs(self, name: str) -> bytes:
        try:  # (aiodocker inspects the container first, for its Tty: a missing one is a 404)
            lines = await self._answer(self._named(name).log(stdout=True, stderr=True))
        except aiodocker.DockerError as exc:
            if exc.status in (404, 409):  # gone, or being removed by another path: no logs
                return b""
            raise
        return "".join(lines).encode()[-MAX_LOG_BYTES:]

    @_engine_call
    async def remove(self, name: str) -> None:
        try:
            await self._answer(self._named(name).delete(force=True))
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return
            if exc.status == NO_CONNECTION:
                raise
            # Another path (a cancel, a sweep) may be removing it: Docker answers 409
            # "already in progress", Podman other words and codes (a 500, to the inspect
            # too). The effect wanted is the container gone: raise only if it stays.
            if not await self._gone_within(name, REMOVAL_WAIT):
                raise

    async def _gone_within(self, name: str, seconds: float) -> bool:
        """Whether `name` is gone within `seconds` (polled: the engine signals nothing)."""
        with anyio.move_on_after(seconds):
            while await self._still_there(name):  # noqa: ASYNC110
                await anyio.sleep(0.2)
            return True
        return False

    async def _still_there(self, name: str) -> bool:
        try:
            return await self._find(name) is not None
        except aiodocker.DockerError as exc:
            if exc.status == NO_CONNECTION:
                raise  # (gone meanwhile: nothing to wait for)
            return True  # (an engine busy removing it may fail the inspect meanwhile)

    @_engine_call
    async def names(self, label: str = LABEL) -> dict[str, str]:
        found = await self._answer(
            self.docker.containers.list(all=True, filters=f'{{"label": ["{label}"]}}'))
        out = {}
        for c in found:
            info = c._container
            name = (info.get("Names") or ["/" + c.id])[0].lstrip("/")
            out[name] = info.get("Labels", {}).get(label, "")
        return out

    async def import_image(self, rootfs_tar: bytes, ref: str) -> str:
        """`docker import`: an image from a root filesystem tar, tagged `ref`; returns its
        digest. No registry is involved (aiodocker has no call for this endpoint)."""
        # The tag inside `repo` (the API allows it): Podman's compatible API ignores `tag`.
        async with self.docker._query(
                "images/create", method="POST", data=rootfs_tar,
                params={"fromSrc": "-", "repo": ref if ":" in ref.rsplit("/", 1)[-1]
                        else f"{ref}:latest"},
                headers={"Content-Type": "application/x-tar"}) as response:
            await response.read()
        info = await self.docker.images.inspect(ref)
        return str(info["Id"])

    def visible_path(self, mount: Mount) -> str:
        return mount.target

    def capacity(self) -> int:
        return host_capacity()


async def build_baseline_image(rt: DockerRuntime, tool: str) -> catalog.DefinitionPushed:
    """The baseline critic `tool` in the reference image (the host's Python, and the tool
    installed in it, mounted read-only): its digest covers the image, the command and the
    tool's version and rules, so a new version of the tool is a new definition."""
    image = await build_reference_image(rt)
    settings, run = baselines.config(tool), baselines.command()
    combined = orjson.dumps({"image": image.digest, "command": run, "config": settings},
                            option=orjson.OPT_SORT_KEYS)
    return catalog.DefinitionPushed(
        agent_type="critic", name=f"baseline-{tool}", tag="docker", runtime="docker",
        image=image.image, command=run, config=settings, host_python=True,
        digest="sha256:" + hashlib.sha256(combined).hexdigest())


async def build_reference_image(rt: DockerRuntime) -> catalog.DefinitionPushed:
    """`docker import` the reference rootfs (no registry needed), tagged by the rootfs's
    own hash: an image already there is reused, so its digest (and the definition) stays
    the same from one push to the next."""
    rootfs = definitions.reference_rootfs()
    ref = f"{definitions.REFERENCE_REPO}:{hashlib.sha256(rootfs).hexdigest()[:12]}"
    try:
        image = str((await rt.docker.images.inspect(ref))["Id"])
    except aiodocker.DockerError:
        image = await rt.import_image(rootfs, ref)
    return catalog.DefinitionPushed(
        agent_type="critic", name="reference", tag="docker", runtime="docker",
        image=ref, command=definitions.reference_command(), digest=image, host_python=True)

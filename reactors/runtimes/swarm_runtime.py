"""Runs as Docker Swarm jobs: past one machine, the cluster engine places them, not props.

Each run is a replicated-job service named as the run's container (`start` finds it by name
first, so a restarted launcher adopts it), with one completion, `restart-condition none`,
its image pinned by digest, the run's limits (memory, CPU, pids, read-only root, every
capability dropped, user nobody) and no network unless the spec asks. The swarm never runs a
job task twice (swarmkit's restart supervisor skips tasks whose desired state is past
running), and props never starts a run's service twice: a run killed, or lost, leaves a
tombstone (a swarm config labelled with the run) that `start` honours until `remove`.

Failing closed (../shared/swarm/README.md, section 4): the manager never times a task out,
and shows it running for as long as its node is Down; a task that completed while its node's
daemon was dead comes back `complete` with its last output missing. So:
- the command runs under a small wrapper in the image's `python3` that merges stdout and
  stderr into one stream and ends it with a marker line holding the command's exit code and
  the number of bytes before it. A task that ended without that marker, or with fewer bytes,
  is lost, never completed;
- a task whose node is not ready for `node_grace` seconds is lost: its tombstone is written,
  its service removed (the node kills the container if it comes back), and `wait` raises
  `RunLost` (retryable: the evaluation runs the case again, as a new run);
- every call to the engine has a deadline (CALL_DEADLINE); an engine that does not answer is
  `EngineUnreachable`, as for Docker.

Files without host bind mounts: a read-only mount is copied into the swarm as configs, one
per file (at most CONFIG_MAX bytes each), mounted read-only at its target on whichever node
runs the task. Only what a node must provide itself is bound: a Unix socket (the database's,
or a relay of it on each node) and a writable mount (a path every node shares).
docs/howto/several-hosts.md says how to set up each.

Finished jobs' tasks and exited containers are never collected by 20.10 (moby#42789):
`remove` deletes the service (and a tombstone); `prune` (every PRUNE_EVERY seconds of
removals) deletes file configs no service has used for an hour (they are named by their
content's hash and shared by the runs of one example: a config is a raft write) and exited
job containers on the node engines the operator names.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import aiodocker
import aiohttp
import anyio
import anyio.to_thread

from props.core.log import errors
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import (
    LABEL,
    MAX_LOG_BYTES,
    ContainerSpec,
    Mount,
    Outcome,
    Reach,
    RunLost,
    host_capacity,
)

API_VERSION = "v1.41"  # Debian 12's docker.io 20.10
CALL_DEADLINE = 30.0  # seconds any one engine call may take
NODE_GRACE = 30.0  # seconds a run's node may be not ready before the run is lost
POLL = 0.25  # seconds between looks at a running task
PRUNE_EVERY = 60.0  # seconds between two prunes of the nodes' exited job containers
CAPACITY_EVERY = 10.0  # seconds between two looks at the nodes' capacity from a start
CONFIG_MAX = 500 * 1024  # the swarm's limit on one config
CONFIGS_MAX = 1000  # configs (files) a run may be given
SOCKET_TARGET = "/run/props-pg"
AGENT_USER = "65534:65534"  # nobody:nogroup
ENDED = "props.swarm.ended"  # a tombstone's label: "killed" or "lost"
OF = "props.swarm.of"  # the run a tombstone is of
FILE = "props.swarm.file"  # a file's config, named by its content's hash, shared by runs
FILE_KEEP = 3600.0  # seconds an unused file config is kept (a start may be about to use it)
FINAL = frozenset({"complete", "failed", "rejected", "shutdown", "orphaned", "remove"})
MARK = b"\x1eprops-end "  # the wrapper's last line: MARK <exit code> <bytes before it>

# Runs the command with stdout and stderr in one stream, then says how it ended and how
# many bytes it wrote: a missing or short tail is then seen, never taken for the whole.
WRAPPER = r"""
import os, subprocess, sys
out, n, last = sys.stdout.buffer, 0, b"\n"
try:
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
except OSError as exc:
    p, msg = None, ("cannot run %r: %s\n" % (sys.argv[1:], exc)).encode()
    out.write(msg); n, rc = len(msg), 127
if p is not None:
    while True:
        b = os.read(p.stdout.fileno(), 65536)
        if not b:
            break
        out.write(b); out.flush(); n += len(b); last = b[-1:]
    rc = p.wait()
if last != b"\n":
    out.write(b"\n"); n += 1
out.write(b"\x1eprops-end %d %d\n" % (rc, n)); out.flush()
sys.exit(rc if rc >= 0 else 128 - rc)
"""

F = TypeVar("F", bound=Callable[..., Coroutine[Any, Any, Any]])


# Each call under CALL_DEADLINE, its errors in the retry rule's words (the Docker runtime's).
_engine_call = docker_runtime.engine_calls("the swarm manager", CALL_DEADLINE)


def ended_output(data: bytes) -> tuple[int, bytes] | None:
    """The command's exit code and output when `data` ends with the wrapper's marker and the
    bytes it counted are all there; None when the tail is missing."""
    body, sep, line = data.rstrip(b"\n").rpartition(b"\n")
    head = body + sep
    if not line.startswith(MARK):
        return None
    try:
        code, count = (int(x) for x in line[len(MARK):].split())
    except ValueError:
        return None
    return (code, head) if count == len(head) else None


def demultiplexed(raw: bytes) -> bytes:
    """The payloads of a multiplexed log stream (8-byte headers), in order; a frame cut
    short ends it (the marker check then finds the tail missing)."""
    out, i = bytearray(), 0
    while i + 8 <= len(raw):
        size = int.from_bytes(raw[i + 4:i + 8], "big")
        out += raw[i + 8:i + 8 + size]
        i += 8 + size
    return bytes(out)


def _name_hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:24]


def tombstone_name(name: str) -> str:
    return f"props-end-{_name_hash(name)}"


@dataclasses.dataclass
class _Files:
    """What a spec's mounts become on the swarm: configs (copied) and binds (node-local)."""

    configs: list[tuple[str, bytes]] = dataclasses.field(default_factory=list)  # target, data
    binds: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def _mounted_files(mounts: Sequence[Mount]) -> _Files:
    """Read-only directories and files as configs; sockets, the folders that hold one (the
    model gateway's) and writable paths as binds."""
    files = _Files()
    for m in mounts:
        mode = os.stat(m.host).st_mode
        holds_socket = stat.S_ISDIR(mode) and any(p.is_socket() for p in Path(m.host).iterdir())
        if stat.S_ISSOCK(mode) or holds_socket or not m.read_only:
            files.binds.append({"Type": "bind", "Source": m.host, "Target": m.target,
                                "ReadOnly": m.read_only})
        elif stat.S_ISDIR(mode):
            root = Path(m.host)
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                files.configs.append((f"{m.target}/{path.relative_to(root)}",
                                      path.read_bytes()))
        else:
            files.configs.append((m.target, Path(m.host).read_bytes()))
    too_big = [t for t, data in files.configs if len(data) > CONFIG_MAX]
    if too_big or len(files.configs) > CONFIGS_MAX:
        raise errors.PropsError(
            f"a swarm run is given its files as configs, at most {CONFIGS_MAX} of at most "
            f"{CONFIG_MAX} bytes each: {len(files.configs)} files, too large: "
            f"{', '.join(too_big[:3]) or 'none'}; put what the run needs in its image")
    return files


class SwarmRuntime:
    kind: str = "swarm"

    def __init__(self, docker: aiodocker.Docker, *, node_grace: float = NODE_GRACE,
                 constraints: Sequence[str] = (), node_engines: Sequence[str] = (),
                 capacity: int | None = None) -> None:
        self.docker = docker
        self.node_grace = node_grace
        self.constraints = list(constraints)
        self.node_engines = list(node_engines)
        self._capacity = capacity
        self._ready: int | None = None  # what the ready nodes hold, as last looked
        self._node_states: dict[str, str] = {}  # by node id, as last seen
        self._capacity_at = -math.inf
        self._not_ready_since: dict[str, float] = {}  # by service name
        self._output: dict[str, bytes] = {}  # a finished run's output, by service name
        self._pruned_at = time.monotonic()
        self.placed: dict[str, str] = {}  # the node (hostname) each run's task ran on

    @classmethod
    @asynccontextmanager
    async def connect(cls, url: str, **options: Any) -> AsyncIterator[SwarmRuntime]:
        """The runtime on the swarm manager at `url`; refused at once when it is not one."""
        try:
            async with aiodocker.Docker(url=url, api_version=API_VERSION) as docker:
                with anyio.fail_after(CALL_DEADLINE):
                    await docker.swarm.inspect()
                    nodes = await docker.nodes.list()
                options.setdefault("capacity", _capacity_of(nodes))
                yield cls(docker, **options)
        except (aiodocker.DockerError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise errors.StoreUnavailable(
                f"no swarm manager answers at {url} ({str(exc)[:200]}): give the manager's "
                f"engine (props serve --runtime swarm --engine URL, or PROPS_SWARM_HOST); "
                f"docs/howto/several-hosts.md") from exc

    async def prepare(self, spec: ContainerSpec, run_dir: Path, reach: Reach) -> ContainerSpec:
        """Over TCP on the operator's network when given (`--agent-database`: the usual way
        across hosts); else through the server's socket, which each node must have at the
        same path (one host, or a relay on each node)."""
        if (tcp := reach.tcp()) is not None:
            dsn, network = tcp
            return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": dsn},
                                       network=True, network_name=network)
        if spec.network:
            return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": reach.host_dsn()})
        dsn, socket = await reach.socket(SOCKET_TARGET)
        return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": dsn},
                                   mounts=[*spec.mounts, socket])

    # -- the engine's objects -----------------------------------------------------------------

    async def _service(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self.docker.services.inspect(name))
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise

    async def _tombstone(self, name: str) -> dict[str, Any] | None:
        found = await self.docker.configs.list(filters={"name": [tombstone_name(name)]})
        exact = [c for c in found if c["Spec"]["Name"] == tombstone_name(name)]
        return dict(exact[0]) if exact else None

    async def _config(self, name: str, data: bytes, labels: dict[str, str]) -> str:
        """The id of the config `name` holding `data`, created unless it exists."""
        try:
            made = await self.docker.configs.create(
                name, base64.b64encode(data).decode(), b64=True, labels=labels)
            return str(made["ID"])
        except aiodocker.DockerError as exc:
            if exc.status != 409:
                raise
        found = await self.docker.configs.list(filters={"name": [name]})
        return str(next(c["ID"] for c in found if c["Spec"]["Name"] == name))

    async def _task(self, service_id: str) -> dict[str, Any] | None:
        """The service's one task (the latest, should the swarm have made another)."""
        tasks = [dict(t) for t in await self.docker.tasks.list(filters={"service": service_id})]
        if not tasks:
            return None
        return max(tasks, key=lambda t: str(t.get("CreatedAt", "")))

    async def _pinned(self, image: str) -> str:
        """`image` by digest, resolved by the manager when given by tag: every node runs the
        same bytes, and a tag moved meanwhile changes nothing."""
        if "@sha256:" in image:
            return image
        try:
            found = await self.docker._query_json(f"distribution/{image}/json")
        except aiodocker.DockerError as exc:
            raise errors.PropsError(
                f"the swarm manager cannot resolve image {image} ({exc.status}): push it to "
                f"the registry every node pulls from, and name it there") from exc
        repo, last = image.rsplit("/", 1) if "/" in image else ("", image)
        name = last.split(":", 1)[0]
        return f"{repo + '/' if repo else ''}{name}@{found['Descriptor']['digest']}"

    # -- the contract ---------------------------------------------------------------------------

    @_engine_call
    async def start(self, spec: ContainerSpec) -> str:
        """The run's service, found by name, else created; never again once it was killed or
        lost (its tombstone's id is returned: `wait` then says how it ended)."""
        found = await self._service(spec.name)
        if found is not None:
            return str(found["ID"])
        tomb = await self._tombstone(spec.name)
        if tomb is not None:
            return str(tomb["ID"])
        if time.monotonic() - self._capacity_at > CAPACITY_EVERY:
            await self.refresh_capacity()
        template = await self._template(spec)
        try:
            made = await self.docker.services.create(
                template, name=spec.name, labels=spec.labels,
                mode={"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}},
                networks=[spec.network_name] if spec.network and spec.network_name else None)
        except aiodocker.DockerError as exc:
            if exc.status == 409 and (again := await self._service(spec.name)) is not None:
                return str(again["ID"])  # another launcher's, a moment ago
            raise
        return str(made["ID"])

    async def _template(self, spec: ContainerSpec) -> dict[str, Any]:
        files = await anyio.to_thread.run_sync(_mounted_files, spec.mounts)
        configs = []
        for target, data in files.configs:
            name = f"props-file-{hashlib.sha256(data).hexdigest()[:32]}"
            configs.append({"ConfigID": await self._config(name, data, {FILE: "1"}),
                            "ConfigName": name,
                            "File": {"Name": target, "UID": "0", "GID": "0", "Mode": 0o444}})
        memory = spec.memory_mb * 1024 * 1024
        return {
            "ContainerSpec": {
                "Image": await self._pinned(spec.image),
                "Command": ["python3", "-c", WRAPPER, *spec.command],
                "Env": dict(spec.env),  # (aiodocker makes K=V of a dict itself)
                "Labels": spec.labels, "User": AGENT_USER, "ReadOnly": True,
                "CapabilityDrop": ["ALL"], "Mounts": files.binds, "Configs": configs,
                "StopGracePeriod": 1_000_000_000,
                "Ulimits": [{"Name": "nofile", "Soft": 4096, "Hard": 4096},
                            {"Name": "nproc", "Soft": 4096, "Hard": 4096}],
            },
            "Resources": {"Limits": {"MemoryBytes": memory, "NanoCPUs": int(spec.cpus * 1e9),
                                     "Pids": 256}},
            "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
            "Placement": {"Constraints": self.constraints},
        }

    async def wait(self, name: str, within: float | None) -> Outcome | None:
        """The outcome once the task has ended with its whole output; None if `within`
        seconds passed first. RunLost when its node stayed away or its tail is missing."""
        deadline = None if within is None else time.monotonic() + within
        while True:
            outcome = await self._look(name)
            if outcome is not None:
                return outcome
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            await anyio.sleep(POLL if left is None else min(POLL, left))

    @_engine_call
    async def _look(self, name: str) -> Outcome | None:
        service = await self._service(name)
        if service is None:
            tomb = await self._tombstone(name)
            if tomb is None:
                raise errors.PropsError(f"no swarm service named {name}")
            if tomb["Spec"]["Labels"].get(ENDED) == "lost":
                raise RunLost(f"run container {name} was lost with its node")
            return Outcome(exit_code=None)  # killed
        task = await self._task(str(service["ID"]))
        if task is None:
            return None  # not placed yet
        if task["Status"]["State"] in FINAL:
            return await self._ended(name, service, task)
        await self._watch_node(name, service, task)
        return None

    async def _ended(self, name: str, service: dict[str, Any],
                     task: dict[str, Any]) -> Outcome:
        """The task's outcome from its marker line; without it the run is lost."""
        got = ended_output(await self._raw_logs(str(service["ID"])))
        if got is None:
            await self._lose(name, service, f"its task ended {task['Status']['State']} "
                                            f"without its output's end")
        code, output = got
        self._output[name] = output[-MAX_LOG_BYTES:]
        # A signal (a negative code from the wrapper, 137 from the kernel's OOM killer or
        # ours) is no exit code of the command's own. The manager never says OOM.
        return Outcome(exit_code=None if code < 0 or code == 137 else code)

    async def _watch_node(self, name: str, service: dict[str, Any],
                          task: dict[str, Any]) -> None:
        """Lose the run once its node has been not ready for `node_grace` seconds."""
        node_id = task.get("NodeID")
        if not node_id:
            return
        node = await self.docker.nodes.inspect(node_id=node_id)
        self.placed[name] = str(node.get("Description", {}).get("Hostname", node_id))
        if self._node_states.get(node_id) != node["Status"]["State"]:
            self._node_states[node_id] = node["Status"]["State"]
            await self.refresh_capacity()  # (a node gone or back: the slots follow)
        if node["Status"]["State"] == "ready":
            self._not_ready_since.pop(name, None)
            return
        since = self._not_ready_since.setdefault(name, time.monotonic())
        if time.monotonic() - since >= self.node_grace:
            await self._lose(name, service, f"its node {self.placed[name]} has been "
                                            f"{node['Status']['State']} for "
                                            f"{self.node_grace:.0f} s")

    async def _lose(self, name: str, service: dict[str, Any], why: str) -> NoReturn:
        """Tombstone first, then remove the service: whatever stops in between, the run is
        never started again, and the node kills the container should it come back."""
        with anyio.fail_after(CALL_DEADLINE, shield=True):  # (a stop waits for it, not longer)
            await self._end(name, service, "lost")
        raise RunLost(f"run container {name} is lost: {why}")

    async def _end(self, name: str, service: dict[str, Any], how: str) -> None:
        labels = {**service["Spec"].get("Labels", {}), ENDED: how, OF: name}
        await self._config(tombstone_name(name), how.encode(), labels)
        await self._delete_service(name)
        self._not_ready_since.pop(name, None)

    async def _delete_service(self, name: str) -> None:
        try:
            await self.docker.services.delete(name)
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                raise

    async def _raw_logs(self, service_id: str) -> bytes:
        """The task's whole output, as bytes (aiodocker's list decodes, and ends quietly
        on a cut stream)."""
        async with self.docker._query(
                f"services/{service_id}/logs", method="GET",
                params={"stdout": "1", "stderr": "1", "follow": "0"}) as response:
            raw = await response.read()
        return demultiplexed(raw)

    @_engine_call
    async def kill(self, name: str) -> None:
        """Remove the running service, leaving its tombstone: `wait` then says killed."""
        service = await self._service(name)
        if service is None:
            return
        task = await self._task(str(service["ID"]))
        if task is not None and task["Status"]["State"] in FINAL:
            return  # ended on its own: its outcome stands
        with anyio.fail_after(CALL_DEADLINE, shield=True):  # (a stop waits for it, not longer)
            await self._end(name, service, "killed")

    @_engine_call
    async def logs(self, name: str) -> bytes:
        if name in self._output:
            return self._output[name]
        service = await self._service(name)
        if service is None:
            return b""
        data = await self._raw_logs(str(service["ID"]))
        got = ended_output(data)
        return (got[1] if got else data)[-MAX_LOG_BYTES:]

    @_engine_call
    async def remove(self, name: str) -> None:
        """The service and its tombstone gone (each a no-op if gone); now and then, what
        `prune` collects."""
        self._output.pop(name, None)
        self._not_ready_since.pop(name, None)
        await self._delete_service(name)
        for config in await self.docker.configs.list(filters={"label": [f"{OF}={name}"]}):
            try:
                await self.docker.configs.delete(config["ID"])
            except aiodocker.DockerError:
                continue  # (gone, or in use for a moment more: the next removal's list)
        if time.monotonic() - self._pruned_at > PRUNE_EVERY:
            self._pruned_at = time.monotonic()
            await self.prune()

    @_engine_call
    async def names(self, label: str = LABEL) -> dict[str, str]:
        """Services carrying `label`, and runs killed or lost that are not removed yet."""
        out = {}
        for c in await self.docker.configs.list(filters={"label": [label, ENDED]}):
            labels = c["Spec"].get("Labels", {})
            out[labels[OF]] = labels.get(label, "")
        for s in await self.docker.services.list(filters={"label": [label]}):
            out[s["Spec"]["Name"]] = s["Spec"].get("Labels", {}).get(label, "")
        return out

    async def prune(self) -> int:
        """File configs no service uses, older than FILE_KEEP; exited containers of props'
        job tasks on the node engines given (20.10 keeps them for ever). How many went. A
        node that does not answer is skipped."""
        removed = await self._prune_files()
        for url in self.node_engines:
            try:
                with anyio.fail_after(CALL_DEADLINE):
                    async with aiodocker.Docker(url=url, api_version=API_VERSION) as node:
                        for c in await node.containers.list(all=True, filters={
                                "label": [LABEL, "com.docker.swarm.task.id"],
                                "status": ["exited", "dead"]}):
                            await c.delete(force=True)
                            removed += 1
            except (aiodocker.DockerError, aiohttp.ClientError, OSError, TimeoutError):
                continue
        return removed

    @_engine_call
    async def _prune_files(self) -> int:
        used = {c["ConfigID"] for s in await self.docker.services.list()
                for c in s["Spec"]["TaskTemplate"]["ContainerSpec"].get("Configs") or []}
        removed = 0
        for c in await self.docker.configs.list(filters={"label": [FILE]}):
            created = datetime.fromisoformat(c["CreatedAt"][:26].rstrip("Z") + "+00:00")
            if c["ID"] in used or (datetime.now(UTC) - created).total_seconds() < FILE_KEEP:
                continue
            try:
                await self.docker.configs.delete(c["ID"])
                removed += 1
            except aiodocker.DockerError:
                continue  # (taken by a service meanwhile)
        return removed

    def visible_path(self, mount: Mount) -> str:
        return mount.target

    def capacity(self) -> int:
        return self._capacity or host_capacity()

    def capacity_now(self) -> int:
        """What the ready nodes hold as last looked (`refresh_capacity`), under capacity()."""
        return max(1, min(self.capacity(), self._ready or self.capacity()))

    async def refresh_capacity(self) -> int:
        """Look at the nodes again (each node's share from its own resources, none for a
        node down or drained): when a node's state changes under a run, and at a start
        CAPACITY_EVERY seconds after the last look."""
        with anyio.fail_after(CALL_DEADLINE):
            nodes = await self.docker.nodes.list()
        self._capacity_at = time.monotonic()
        self._node_states.update((str(n["ID"]), str(n["Status"]["State"])) for n in nodes)
        self._ready = sum(capacity_by_node(nodes).values())
        return self.capacity_now()


@asynccontextmanager
async def opened(engine: str | None, required: bool) -> AsyncIterator[SwarmRuntime | None]:
    """For `props serve`: the manager at PROPS_SWARM_HOST, else at `engine` when the swarm
    was chosen by name (`--runtime swarm --engine URL`); None with `auto` and neither.
    PROPS_SWARM_NODE_ENGINES (comma-separated) names the node engines `prune` cleans and
    PROPS_SWARM_NODE_GRACE the seconds a node may be away before its runs are lost."""
    url = os.environ.get("PROPS_SWARM_HOST") or (engine if required else None)
    if url is None:
        if required:
            raise errors.ConfigurationError(
                "the swarm runtime needs its manager's engine: PROPS_SWARM_HOST=URL, or "
                "--engine URL (docs/howto/several-hosts.md)")
        yield None
        return
    nodes = [u for u in os.environ.get("PROPS_SWARM_NODE_ENGINES", "").split(",") if u]
    grace = float(os.environ.get("PROPS_SWARM_NODE_GRACE", NODE_GRACE))
    async with SwarmRuntime.connect(url, node_engines=nodes, node_grace=grace) as swarm:
        yield swarm


RUNS_PER_CORE = 4  # a critic waits on its model most of the time: a core runs several
MEMORY_MB_EACH = 512  # ... each with this much memory of its node's


def node_capacity(node: Any, memory_mb_each: int = MEMORY_MB_EACH) -> int:
    """How many runs `node` (as the manager lists it) holds: a few per core, bounded by its
    memory; none when it is not ready or not active (drained, paused)."""
    if node.get("Status", {}).get("State") != "ready" or \
            node.get("Spec", {}).get("Availability") != "active":
        return 0
    res = node.get("Description", {}).get("Resources", {})
    cores = max(1, int(res.get("NanoCPUs", 1e9) // 1e9))
    by_memory = max(1, int(res.get("MemoryBytes", 0)) // (memory_mb_each << 20))
    return min(cores * RUNS_PER_CORE, by_memory)


def capacity_by_node(nodes: Sequence[Any]) -> dict[str, int]:
    """Each node's capacity from its own resources, by hostname."""
    return {str(n.get("Description", {}).get("Hostname", n.get("ID"))): node_capacity(n)
            for n in nodes}


def _capacity_of(nodes: Sequence[Any]) -> int:
    """What the ready nodes hold together (at least one run)."""
    return max(1, sum(capacity_by_node(nodes).values()))

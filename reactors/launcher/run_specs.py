"""What a run's container is given: the example's files, read-only, as of the snapshot
version current when the run was requested; a grader's task; the server's socket for an
agent without network; the model gateway's socket and the run's credential for it (never a
key); its environment, limits and labels."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pydantic

from props.core.domain import catalog, chat, definitions, endpoints
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.store import EventStore
from props.reactors import gateway
from props.reactors.gateway import Gateway
from props.reactors.launcher import agent_roles, grader_runs
from props.reactors.launcher.run_state import RunState
from props.reactors.runtimes.container_runtime import (
    DEPLOYMENT_LABEL,
    LABEL,
    ContainerRuntime,
    ContainerSpec,
    Mount,
)
from props.schema import queries

_Q = queries.load("agents")
EXAMPLE_TARGET = "/example"
GRADING_TARGET = "/grading"
BLOBS_AT_ONCE = 256  # an example's files fetched this many to a round trip


class Task(pydantic.BaseModel):
    """PROPS_TASK: what a run's agent is told (the agent SDK's `Task` reads it; the how-to,
    docs/howto/write-a-critic.md, documents it for agents in any language)."""

    model_config = pydantic.ConfigDict(frozen=True)

    run_id: uuid.UUID
    agent_type: catalog.AgentType
    model: str
    example: catalog.Example
    config: dict[str, Any] = pydantic.Field(default_factory=dict)
    timeout_seconds: float
    budget_usd: float


async def deployment_of(store: EventStore) -> str:
    """A stable name of this database (the id its migration drew, and its name: a copy made
    from a template is another deployment): the label that tells this deployment's
    containers from others on one engine."""
    row = await store.sql.fetchrow(_Q["deployment"])
    assert row is not None
    return hashlib.sha256(f"{row[0]}:{row[1]}".encode()).hexdigest()[:16]


CONTAINER_PREFIX = "props-run-"
_RUN_ID_CHARACTERS = 36  # a UUID as text, the name's last part


def container_name(deployment: str, run_id: uuid.UUID) -> str:
    """The name of a run's container (and of the task that watches it):
    `props-run-<deployment>-<run id>`. The deployment in it (`deployment_of`) keeps two
    props databases on one engine from taking each other's names (a copy of a database
    holds the same run ids: by run id alone its launcher would adopt or remove ours)."""
    return f"{CONTAINER_PREFIX}{deployment}-{run_id}"


def run_of_container(name: str) -> uuid.UUID | None:
    """The run a container is named for (`container_name`'s inverse, and the name before
    the deployment was in it, `props-run-<run id>`); None for another."""
    if not name.startswith(CONTAINER_PREFIX):
        return None
    try:
        return uuid.UUID(name[-_RUN_ID_CHARACTERS:])
    except ValueError:
        return None


def write_read_only(target: Path, files: list[tuple[str, bytes]]) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for rel, content in files:
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(0o444)


@dataclasses.dataclass(frozen=True)
class AgentDatabase:
    """Where agents reach the database over TCP, when their engine is not on its host: the
    run's own role, over TLS when `sslmode` asks for it, from containers on `network` (an
    engine network whose egress should reach only the database: docs/howto/several-hosts.md,
    "Agents over TCP"). Every restriction of the run's role holds as through the socket."""

    host: str
    port: int
    sslmode: str = "require"
    network: str = "bridge"


@dataclasses.dataclass(frozen=True)
class DatabaseReach:
    """The ways a run's agent may reach this database (containers.Reach), each as the run's
    own role: its runtime's `prepare` picks one."""

    specs: RunSpecs
    credentials: agent_roles.Credentials

    def host_dsn(self) -> str:
        c = self.credentials
        return agent_roles.agent_dsn(self.specs.store.dsn, c.role, c.password)

    def tcp(self) -> tuple[str, str] | None:
        tcp, c = self.specs.agent_database, self.credentials
        if tcp is None:
            return None
        return (agent_roles.agent_dsn(self.specs.store.dsn, c.role, c.password,
                                      tcp=(tcp.host, tcp.port, tcp.sslmode)), tcp.network)

    async def socket(self, target: str) -> tuple[str, Mount]:
        host_dir, port = await self.specs.server_socket()
        socket, c = f".s.PGSQL.{port}", self.credentials
        dsn = agent_roles.agent_dsn(self.specs.store.dsn, c.role, c.password, (target, port))
        return dsn, Mount(f"{host_dir}/{socket}", f"{target}/{socket}")


class RunSpecs:
    """Builds each run's container spec on one database, with the runs' files under
    `work_dir`."""

    def __init__(self, store: EventStore, work_dir: Path, gateway: Gateway,
                 agent_database: AgentDatabase | None = None) -> None:
        self.store = store
        self.work_dir = work_dir
        self.gateway = gateway
        self.agent_database = agent_database
        self._socket: tuple[str, str] | None = None  # (host dir, port) of the server

    async def spec(self, state: RunState, definition: catalog.DefinitionPushed,
                    credentials: agent_roles.Credentials, rt: ContainerRuntime,
                    deployment: str) -> ContainerSpec:
        """The container of the run: its mounts (the example read-only, a grader's task, the
        server's socket for an agent without network), its environment, limits and labels."""
        req = state.requested
        run_dir = self.work_dir / str(req.run_id)
        example = await self.materialise(req, run_dir / "example", state.requested_at)
        mounts = [Mount(str(example), EXAMPLE_TARGET)]
        if req.agent_type == "grader":
            # A restarted grader run grades what it was given: issues graded meanwhile too.
            state.grading, gt = await grader_runs.task_for(
                self.store, definition, req, include_graded=state.container_started)
            grading_dir = run_dir / "grading"
            await anyio.to_thread.run_sync(grader_runs.write_inputs, state.grading, gt,
                                           grading_dir)
            mounts.append(Mount(str(grading_dir), GRADING_TARGET))
        if definition.host_python:
            mounts += [Mount(p, p) for p in definitions.host_python_paths()]
        task = Task(run_id=req.run_id, agent_type=req.agent_type, model=req.model,
                    example=req.example, config=definition.config,
                    timeout_seconds=req.timeout_seconds, budget_usd=req.budget_usd)
        env = {"PROPS_TASK": task.model_dump_json(),
               "PROPS_EXAMPLE_DIR": rt.visible_path(mounts[0]),
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"}
        if req.agent_type == "grader":
            env["PROPS_GRADING_DIR"] = rt.visible_path(mounts[1])
        if endpoints.endpoint_named(definition.config) is not None:
            # No key enters a run: it reaches its model through the gateway's socket, with
            # a credential of its own that ends with it.
            mounts.append(Mount(str(self.gateway.socket_dir), gateway.CONTAINER_DIR))
            env[chat.GATEWAY_VARIABLE] = (f"unix:{rt.visible_path(mounts[-1])}/"
                                          f"{gateway.SOCKET_NAME}")
            env[chat.CREDENTIAL_VARIABLE] = await self.gateway.admit(
                req.run_id, req.model, definition, req.budget_usd)
        spec = ContainerSpec(
            name=container_name(deployment, req.run_id),
            image=definition.image or definition.digest,
            command=list(definition.command),
            env=env, mounts=mounts,
            labels={LABEL: str(req.run_id), DEPLOYMENT_LABEL: deployment},
            network=definition.limits.network, cpus=definition.limits.cpus,
            memory_mb=definition.limits.memory_mb,
        )
        return await rt.prepare(spec, run_dir, DatabaseReach(self, credentials))

    async def server_socket(self) -> tuple[str, str]:
        """The directory of the server's Unix socket (on this host) and its port: how an
        agent without network reaches the database."""
        if self._socket is None:
            row = await self.store.sql.fetchrow(_Q["server_socket"])
            assert row is not None
            dirs, port = row["directories"], row["port"]
            found = [d.strip() for d in str(dirs).split(",")
                     if d.strip() and await anyio.Path(d.strip()).is_dir()]
            if not found:
                raise errors.ConfigurationError(
                    "the database server has no Unix socket on this host, so agents without "
                    "network cannot reach it: run the launcher on the database host, or give "
                    "the definition network access")
            self._socket = (found[0], str(port))
        return self._socket

    async def materialise(self, req: catalog.RunRequested, target: Path,
                           requested_at: datetime) -> Path:
        """The example's files (and nothing else), as of the snapshot version current when
        the run was requested, in a directory the agent can only read."""
        snapshot = await self.snapshot(req.example.snapshot, requested_at)
        if snapshot is None:
            raise errors.PropsError(f"snapshot {req.example.snapshot} is not in the log")
        members = {f.path for f in snapshot.files}
        if req.example.files_hash is not None:
            chosen = next((fs for fs in snapshot.ground_truth.file_sets
                           if fs.files_hash == req.example.files_hash), None)
            if chosen is None:
                raise errors.PropsError(f"{req.example.snapshot} has no file set "
                                        f"{req.example.files_hash}")
            members = set(chosen.files)
        # Each distinct content fetched and held once (a snapshot may name one blob at a
        # thousand paths), BLOBS_AT_ONCE to a round trip: one query a file made a real
        # project's 453 files 453 round trips before each run's start.
        wanted = sorted({f.sha256 for f in snapshot.files if f.path in members})
        contents: dict[str, bytes] = {}
        for at in range(0, len(wanted), BLOBS_AT_ONCE):
            contents.update(await self.store.get_blobs(wanted[at:at + BLOBS_AT_ONCE]))
        if missing := next((sha for sha in wanted if sha not in contents), None):
            raise errors.BlobNotFound(f"no blob {missing} in this database")
        files = [(f.path, contents[f.sha256]) for f in snapshot.files if f.path in members]
        await anyio.to_thread.run_sync(write_read_only, target, files)
        return target

    async def snapshot(self, slug: str, at: datetime) -> catalog.SnapshotSynced | None:
        history = await specimen_sync.history_of(self.store, slug)
        return history.in_force_at(at) if history else None

"""The system under chaos: a scratch database, two `props serve` replicas, the load, and
the faults injected at random times drawn from a fixed seed."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx

from props.core.domain import catalog, streams
from props.core.log import database, embedded, errors, retries
from props.core.log.checkpoints import START
from props.core.log.store import EventStore
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import LABEL
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.schema import queries
from props.tools.checks.chaos.engine_endpoint import EngineEndpoint
from props.tools.checks.chaos.own_engine import OwnEngine, terminate
from props.tools.command_line.render import Console

console = Console(highlight=False, stderr=True)

T = TypeVar("T")
_Q = queries.load("chaos")
# The load's critic: a local command that reports what an LLM critic reports (a prompt, a
# model call with tokens and cost, issues at lines drawn from the run id, a phase), without
# a model: fast, deterministic, and it exercises every projection, the additive ones too.
CHAOS_AGENT = """
import random
from props.core.domain import catalog
from props.reactors.agents.sdk import Agent
with Agent.from_environment() as a:
    rng = random.Random(a.run_id.int)
    files = [f for f in a.files() if f.endswith(".py")]
    sha = a.prompt("review " + ",".join(files))
    a.report(catalog.LlmRequested(run_id=a.run_id, request_id="r1", model=a.task.model,
                                  message_sha256s=[sha]))
    a.report(catalog.LlmResponded(run_id=a.run_id, request_id="r1", response_sha256=sha,
                                  tokens_in=rng.randint(500, 4000), tokens_out=300,
                                  cost_usd=0.001, latency_ms=5))
    for n in range(rng.randint(1, 6)):
        line = rng.randint(1, 60)
        a.issue(rng.choice(files), line, line + rng.randint(0, 3), "why")
    a.phase("review")
"""
HOSTILE_EVERY = 10  # every tenth requested run is the hostile critic
SPARE, SPARE_LEASE = "spare", 3.0  # the third launcher, and how long it may be gone
# The fourth launcher, whose engine (an endpoint of the run's own) the fault engine-gone
# takes away for good, and how long its runs wait for it before failing.
DOOMED, DOOMED_ENGINE_WAIT = "doomed", 8.0
# How long engine-gone waits for the doomed launcher to have a Docker run in flight: taken
# away idle, its engine fails nothing and the invariant holds vacuously (every run of 12-07
# before this wait: "0 Docker run(s) ... in flight"); the cut mid-answer needs one in flight.
DOOMED_BUSY_WAIT = 20.0
TERMINATE_WAIT = 30.0  # seconds a SIGTERMed replica or launcher has to stop, then SIGKILL
NOT_INJECTED = {"disk-full": "the disk is shared with the machine"}


@dataclasses.dataclass
class Chaos:
    store: EventStore
    home: Path
    server_home: Path | None  # the embedded server this command owns (it can restart it)
    rng: random.Random
    services: list[anyio.abc.Process | None] = dataclasses.field(default_factory=list)
    # A third process: a launcher of its own name and engine (a local one, under its own
    # home; Docker shared), sharing the queue, until a fault kills it for good.
    spare: anyio.abc.Process | None = None
    # A fourth: a launcher whose Docker engine is an endpoint of this run's (forwarding to
    # the machine's), until the fault engine-gone takes it away; `gone_at` in the log's time.
    doomed: anyio.abc.Process | None = None
    endpoint: EngineEndpoint | None = None
    gone_at: dt.datetime | None = None
    # The engine of the run's own that restart-docker restarts (--restart-docker), or why not.
    engine: OwnEngine | None = None
    engine_why: str = "not asked for (--restart-docker)"
    faults: list[tuple[float, str, str]] = dataclasses.field(default_factory=list)
    prefixes: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)
    seen: list[uuid.UUID] = dataclasses.field(default_factory=list)
    requested: list[uuid.UUID] = dataclasses.field(default_factory=list)
    crashes: list[str] = dataclasses.field(default_factory=list)  # replicas that died alone
    api_ports: list[int] = dataclasses.field(default_factory=list)  # one per replica
    api_token: str = ""
    api_answers: dict[int, set[uuid.UUID]] = dataclasses.field(default_factory=dict)
    api_retries: int = 0
    began: float = dataclasses.field(default_factory=time.monotonic)

    def env(self) -> dict[str, str]:
        return {**os.environ, "PROPS_DSN": self.store.dsn, "PROPS_HOME": str(self.home)}

    async def start_service(self, i: int) -> None:
        log = await anyio.to_thread.run_sync(
            lambda: open(self.home / f"serve-{i}.log", "ab"))
        try:
            self.services[i] = await anyio.open_process(
                [sys.executable, "-m", "props.tools.cli", "serve", "--max-concurrent", "6",
                 "--trust-local-commands",  # (the chaos agent is a command of props' own)
                 "--http", f"127.0.0.1:{self.api_ports[i]}"],
                env=self.env(), stdout=subprocess.DEVNULL, stderr=log)
        finally:
            log.close()

    async def _start_launcher(self, name: str, *flags: str) -> anyio.abc.Process:
        """A `props serve` of one launcher, under a home of its own (its local runtime)."""
        log = await anyio.to_thread.run_sync(lambda: open(self.home / f"{name}.log", "ab"))
        try:
            return await anyio.open_process(
                [sys.executable, "-m", "props.tools.cli", "serve", "--only", "launcher",
                 "--trust-local-commands", "--launcher-name", name, *flags],
                env={**self.env(), "PROPS_HOME": str(self.home / name)},
                stdout=subprocess.DEVNULL, stderr=log)
        finally:
            log.close()

    async def start_spare(self) -> None:
        self.spare = await self._start_launcher(
            SPARE, "--capacity", "3", "--lease-seconds", str(SPARE_LEASE))

    async def start_doomed(self, tg: anyio.abc.TaskGroup) -> None:
        """The doomed launcher and its engine endpoint (Docker reachable through a Unix
        socket only: else there is no engine to forward to, and the fault is NORUN)."""
        if not docker_runtime.engine_url().startswith("unix://") \
                or not await docker_runtime.reachable():
            return
        self.endpoint = EngineEndpoint(self.home / "doomed-engine.sock")
        await tg.start(self.endpoint.serve)
        self.doomed = await self._start_launcher(
            DOOMED, "--capacity", "2", "--engine", self.endpoint.url,
            "--engine-wait", str(DOOMED_ENGINE_WAIT))

    async def kill(self, i: int) -> None:
        """SIGKILL replica `i`; a replica that had died on its own is recorded as such."""
        proc = self.services[i]
        if proc is None:
            return
        if proc.returncode is not None:
            tail = (self.home / f"serve-{i}.log").read_bytes()[-2000:].decode(errors="replace")
            self.crashes.append(f"replica {i} exited with {proc.returncode}: {tail}")
        else:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()

    async def stop_services(self) -> None:
        for i, proc in enumerate(self.services):
            if proc is not None and proc.returncode is not None:
                await self.kill(i)  # records how it had died
            elif proc is not None:
                await terminate(proc, TERMINATE_WAIT)
            self.services[i] = None  # stopped: a second stop finds nothing to do
        for launcher in (self.spare, self.doomed):
            if launcher is not None and launcher.returncode is None:
                await terminate(launcher, TERMINATE_WAIT)

    async def request_over_http(self, client: httpx.AsyncClient, n: int,
                                body: dict[str, Any]) -> uuid.UUID:
        """POST the run request to a replica's API until one answers 202: a replica being
        killed, restarted or without its database is tried again (the other one first),
        always with the same idempotency key, so a request whose answer was lost becomes one
        run, not two."""
        tried = 0

        async def attempt() -> uuid.UUID:
            port = self.api_ports[(n + tried) % len(self.api_ports)]
            answer = await client.post(
                f"http://127.0.0.1:{port}/api/runs/critic", json=body,
                headers={"Authorization": f"Bearer {self.api_token}",
                         "Idempotency-Key": f"chaos-{n}"})
            if answer.status_code >= 500:
                raise _Unanswered(f"{answer.status_code} {answer.text[:200]}")
            if answer.status_code != 202:
                raise errors.PropsError(f"the API refused request {n}: "
                                        f"{answer.status_code} {answer.text[:200]}")
            run_id = uuid.UUID(answer.json()["run_ids"][0])
            self.api_answers.setdefault(n, set()).add(run_id)
            return run_id

        def next_replica(_: BaseException, __: int) -> None:
            nonlocal tried
            tried += 1
            self.api_retries += 1

        try:
            return await retries.API_REQUEST.call(
                attempt, retries.of_kinds(httpx.TransportError, _Unanswered),
                on_retry=next_replica)
        except (httpx.TransportError, _Unanswered) as exc:
            raise errors.PropsError(f"no replica's API took request {n} within "
                                    f"{retries.API_REQUEST.seconds:.0f} s: {exc}") from exc

    # -- faults ---------------------------------------------------------------------------

    async def inject(self, kind: str) -> str:
        if kind == "kill-service":
            i = self.rng.randrange(len(self.services))
            await self.kill(i)
            await anyio.sleep(self.rng.uniform(0.2, 2.0))
            await self.start_service(i)
            return f"replica {i} SIGKILLed and restarted"
        if kind == "kill-all-services":  # as a host reboot would
            for i in range(len(self.services)):
                await self.kill(i)
            await anyio.sleep(self.rng.uniform(0.2, 2.0))
            for i in range(len(self.services)):
                await self.start_service(i)
            return "every replica SIGKILLed and restarted"
        if kind == "kill-launcher":
            if self.spare is None or self.spare.returncode is not None:
                return "NORUN: the spare launcher is gone already"
            self.spare.send_signal(signal.SIGKILL)
            await self.spare.wait()
            return (f"launcher {SPARE} SIGKILLed for good: its runs are taken over once its "
                    f"{SPARE_LEASE:.0f} s lease runs out")
        if kind == "terminate-listeners":
            # A listener's session last ran its LISTEN, or the ping that checks it is alive.
            n = await retry(lambda: self.store.sql.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND application_name = 'props' AND state = 'idle' "
                "AND (query LIKE 'LISTEN%' OR query = 'SELECT 1')"))
            return f"{n} listener backend(s) terminated"
        if kind == "kill-container":
            return await self._kill_container()
        if kind == "idle-transaction":
            seconds = self.rng.uniform(5, 15)
            async with database.session(self.store.dsn) as conn:
                async with conn.transaction():
                    await conn.fetchval("SELECT pg_current_xact_id()")
                    await anyio.sleep(seconds)
            return f"a transaction held open for {seconds:.0f} s"
        if kind == "restart-docker":
            return await self._restart_docker()
        if kind == "engine-gone":
            if self.endpoint is None:
                return "NORUN: no Docker engine on a Unix socket to stand in front of"
            if self.endpoint.gone:
                return "NORUN: the doomed launcher's engine is gone already"
            busy = await self._doomed_busy(DOOMED_BUSY_WAIT)
            self.gone_at = await retry(lambda: self.store.sql.fetchval("SELECT now()"))
            self.endpoint.take_away()
            return (f"launcher {DOOMED}'s engine gone for good: its runs fail as "
                    f"engine_unreachable after {DOOMED_ENGINE_WAIT:.0f} s ({busy} Docker "
                    f"run(s) in flight on it)")
        if kind == "restart-postgres":
            if self.server_home is None:
                return "NORUN: not the embedded server this command started"
            await anyio.to_thread.run_sync(embedded.stop, self.server_home)
            await anyio.sleep(self.rng.uniform(0.5, 2.0))
            await anyio.to_thread.run_sync(embedded.ensure_running, self.server_home)
            return "PostgreSQL stopped and started"
        raise ValueError(kind)

    async def _doomed_busy(self, seconds: float) -> int:
        """How many Docker runs the doomed launcher has in flight (claimed, container
        started, not exited), waiting up to `seconds` for one."""
        busy = 0
        with anyio.move_on_after(seconds):
            while True:
                found = await retry(lambda: self.store.read_streams(
                    [streams.run(r) for r in self.requested]))
                busy = 0
                for records in found.values():
                    events = [r.event for r in records]
                    claims = [e for e in events if isinstance(e, catalog.RunClaimed)]
                    busy += bool(claims) and claims[-1].launcher == DOOMED \
                        and isinstance(events[0], catalog.RunRequested) \
                        and events[0].definition == "chaos-docker" \
                        and any(isinstance(e, catalog.ContainerStarted) for e in events) \
                        and not any(isinstance(e, catalog.ContainerExited) for e in events)
                if busy:
                    return busy
                await anyio.sleep(0.2)
        return busy

    async def _kill_container(self) -> str:
        """Kill one running container of this run's, local or Docker, from outside."""
        ours = {str(r) for r in self.requested}
        local = LocalRuntime(self.home / "runs" / "local-containers", trust_commands=True)
        candidates: list[tuple[str, str]] = [
            ("local", n) for n, v in (await local.names(LABEL)).items() if v in ours]
        if await docker_runtime.reachable():
            async with DockerRuntime.connect() as docker:
                candidates += [("docker", n) for n, v in (await docker.names(LABEL)).items()
                               if v in ours]
        if not candidates:
            return "no container was running"
        kind, name = self.rng.choice(sorted(candidates))
        if kind == "local":
            await local.kill(name)
        else:
            async with DockerRuntime.connect() as docker:
                await docker.kill(name)
        return f"{kind} container {name} killed"

    async def _restart_docker(self) -> str:
        """Stop the run's own Docker engine and start it again (never the machine's)."""
        if self.engine is None:
            return f"NORUN: no engine of the run's own ({self.engine_why})"
        return await self.engine.restart()

    # -- watching -------------------------------------------------------------------------

    async def watch(self) -> None:
        """A subscriber of the whole log, until cancelled: every event it is given, in order."""
        async with self.store.subscribe(START, poll_interval=0.2) as sub:
            async for batch in sub:
                self.seen.extend(r.event_id for r in batch)

    async def mark_prefix(self) -> None:
        """Marks the log as it stands now, to check again at the end (`log_mark`)."""
        self.prefixes.append(await log_mark(self.store))


async def log_mark(store: EventStore) -> tuple[int, int, str]:
    """The log's visibility fence now, with the count and hash of the rows before it. Those
    rows are final, so a difference later is an event lost, changed or slipped in behind
    readers that had passed it."""
    fence: int = await retry(lambda: store.sql.fetchval(_Q["log_fence"]))
    count, digest = await log_prefix(store, fence)
    return fence, count, digest


async def log_prefix(store: EventStore, fence: int) -> tuple[int, str]:
    rows = await retry(lambda: store.sql.fetch(_Q["log_prefix"], fence))
    h = hashlib.sha256()
    for r in rows:
        h.update(f"{r[0]}|{r[1]}|{r[2]}\n".encode())
    return len(rows), h.hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def retry(op: Callable[[], Awaitable[T]]) -> T:
    """The driver's own queries, through a database that may be restarting (DRIVER)."""
    return await retries.DRIVER.call(op, retries.of_kinds(*database.UNAVAILABLE))


class _Unanswered(Exception):
    """A replica answered 5xx: it is restarting or without its database."""


@asynccontextmanager
async def scratch_server(home: Path) -> AsyncIterator[tuple[str, Path | None]]:
    """PROPS_DSN's server, or an embedded one of this run's own (which it may restart)."""
    if dsn := os.environ.get("PROPS_DSN", "").strip():
        yield dsn, None
        return
    server_home = home / "server"
    dsn = await anyio.to_thread.run_sync(embedded.ensure_running, server_home)
    try:
        yield dsn, server_home
    finally:
        await anyio.to_thread.run_sync(embedded.stop, server_home)



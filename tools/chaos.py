"""`props chaos`: the assembled system under load while everything goes wrong, then a check
that nothing was lost.

It starts two `props serve` processes (replicas of every service, each with its HTTP API) on
a scratch database, drives a steady load of critic run requests (every other one in Docker
when an engine answers; half of them through a replica's HTTP API, retried with an
idempotency key across kills and restarts), and meanwhile injects faults at random times
drawn from a fixed seed: SIGKILL of a service process, or of all of them (restarted a moment
later), a PostgreSQL restart (when the server is the embedded one this command started),
termination of the listeners' backends, a running agent container killed from outside, a
transaction held open for a while (the fence stalls), and with --restart-docker a stop and
start of the Docker engine (only where nothing else uses it). Every tenth run is a hostile
critic (props.tools.hostile_critic): it tries every way past its role and then reports
malformed data, so it must end failed, having breached nothing, while the others go on. A
full disk is not injected: the disk is shared with the rest of the machine (it prints
NORUN). It stops by itself: the load for `--seconds`, then at most `--drain-seconds` for the
work to finish. Then it checks the invariants and prints them as a table; the exit code is
0 only if every one held.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx

from props.core.domain import catalog, definitions, specimen_sync, specimens, streams, tokens
from props.core.domain.store import open_store
from props.core.log import database, embedded, errors
from props.core.log.checkpoints import START
from props.core.log.store import EventStore
from props.projections import engine
from props.reactors import docker_runtime
from props.reactors.containers import LABEL
from props.reactors.docker_runtime import DockerRuntime
from props.reactors.local_runtime import LocalRuntime
from props.tools import hostile_critic, samples, scratch
from props.tools.render import Console, Table

console = Console(highlight=False, stderr=True)
T = TypeVar("T")
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
        a.issue(f"i{n}", "why", [catalog.Location(file=rng.choice(files),
                ranges=[catalog.LineRange(start=line, end=line + rng.randint(0, 3))])])
    a.phase("review")
"""
HOSTILE_EVERY = 10  # every tenth requested run is the hostile critic
FAULTS = ("kill-service", "kill-all-services", "terminate-listeners", "kill-container",
          "idle-transaction", "restart-postgres")
NOT_INJECTED = {"disk-full": "the disk is shared with the machine"}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "chaos", help="load and faults on the whole service, then check nothing was lost",
        description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("--seed", type=int, default=2026, help="the fault schedule's seed")
    p.add_argument("--seconds", type=float, default=60, help="how long the load runs")
    p.add_argument("--runs", type=int, default=200, help="critic runs requested in all")
    p.add_argument("--faults", type=int, default=12,
                   help=f"faults injected during the load (each kind once in every "
                        f"{len(FAULTS)})")
    p.add_argument("--drain-seconds", type=float, default=180,
                   help="at most this long for the work to finish after the load")
    p.add_argument("--restart-docker", action="store_true",
                   help="also stop and start the Docker engine (dockerd) as a fault: only on "
                   "a machine whose engine nothing else is using")
    p.set_defaults(handler=chaos_cmd)


@dataclasses.dataclass
class Invariant:
    name: str
    held: bool | None  # None: not checked (NORUN)
    detail: str

    @property
    def verdict(self) -> str:
        return "NORUN" if self.held is None else ("HELD" if self.held else "BROKEN")


@dataclasses.dataclass
class Chaos:
    store: EventStore
    home: Path
    server_home: Path | None  # the embedded server this command owns (it can restart it)
    rng: random.Random
    services: list[anyio.abc.Process | None] = dataclasses.field(default_factory=list)
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
                 "--http", f"127.0.0.1:{self.api_ports[i]}"],
                env=self.env(), stdout=subprocess.DEVNULL, stderr=log)
        finally:
            log.close()

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
                proc.send_signal(signal.SIGTERM)
                with anyio.move_on_after(30):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            self.services[i] = None  # stopped: a second stop finds nothing to do

    async def request_over_http(self, client: httpx.AsyncClient, n: int,
                                body: dict[str, Any]) -> uuid.UUID:
        """POST the run request to a replica's API until one answers 202: a replica being
        killed, restarted or without its database is tried again (the other one first),
        always with the same idempotency key, so a request whose answer was lost becomes one
        run, not two."""
        deadline = time.monotonic() + 120
        attempt = 0
        while True:
            port = self.api_ports[(n + attempt) % len(self.api_ports)]
            try:
                answer = await client.post(
                    f"http://127.0.0.1:{port}/api/runs/critic", json=body,
                    headers={"Authorization": f"Bearer {self.api_token}",
                             "Idempotency-Key": f"chaos-{n}"})
                if answer.status_code == 202:
                    run_id = uuid.UUID(answer.json()["run_ids"][0])
                    self.api_answers.setdefault(n, set()).add(run_id)
                    return run_id
                if answer.status_code < 500:
                    raise errors.PropsError(f"the API refused request {n}: "
                                            f"{answer.status_code} {answer.text[:200]}")
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise errors.PropsError(f"no replica's API took request {n} within 120 s")
            attempt += 1
            self.api_retries += 1
            await anyio.sleep(0.2)

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
        if kind == "terminate-listeners":
            # A listener's session last ran its LISTEN, or the ping that checks it is alive.
            n = await _retry(lambda: self.store.pool.fetchval(
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
        if kind == "restart-postgres":
            if self.server_home is None:
                return "NORUN: not the embedded server this command started"
            await anyio.to_thread.run_sync(embedded.stop, self.server_home)
            await anyio.sleep(self.rng.uniform(0.5, 2.0))
            await anyio.to_thread.run_sync(embedded.ensure_running, self.server_home)
            return "PostgreSQL stopped and started"
        raise ValueError(kind)

    async def _kill_container(self) -> str:
        """Kill one running container of this run's, local or Docker, from outside."""
        ours = {str(r) for r in self.requested}
        local = LocalRuntime(self.home / "runs" / "local-containers")
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
        """Stop the Docker engine and start it again with the same command line."""
        found = await anyio.run_process(["pidof", "dockerd"], check=False)
        pids = found.stdout.split()
        if not pids:
            return "NORUN: no dockerd process on this machine"
        await anyio.to_thread.run_sync(_restart_process, int(pids[0]),
                                       self.home / "dockerd.log")
        await _retry(_docker_answers, seconds=60)
        return "dockerd stopped and started"

    # -- watching -------------------------------------------------------------------------

    async def watch(self, stop: anyio.Event) -> None:
        """A subscriber of the whole log: every event it is given, in order."""
        async with self.store.subscribe(START, poll_interval=0.2) as sub:
            async for batch in sub:
                self.seen.extend(r.event_id for r in batch)
                if stop.is_set():
                    return

    async def mark_prefix(self) -> None:
        """Count and hash of the log up to its current head, to check again at the end."""
        head = await _retry(lambda: self.store.pool.fetchval(
            "SELECT coalesce(max(global_position), 0) FROM props.events"))
        count, digest = await _prefix(self.store, head)
        self.prefixes.append((head, count, digest))


def _restart_process(pid: int, log: Path) -> None:
    """SIGTERM a daemon, wait until it is gone, start it again with its own command line."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    with open(log, "ab") as out:
        subprocess.Popen([a.decode() for a in argv], stdout=out, stderr=out,
                         start_new_session=True)


async def _docker_answers() -> None:
    if not await docker_runtime.reachable():
        raise errors.StoreUnavailable("the Docker engine is not back yet")


async def _prefix(store: EventStore, head: int) -> tuple[int, str]:
    rows = await _retry(lambda: store.pool.fetch(
        "SELECT event_id, type, data::text FROM props.events WHERE global_position <= $1 "
        "ORDER BY global_position", head))
    h = hashlib.sha256()
    for r in rows:
        h.update(f"{r[0]}|{r[1]}|{r[2]}\n".encode())
    return len(rows), h.hexdigest()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _retry(op: Callable[[], Awaitable[T]], seconds: float = 60) -> T:
    """The driver's own queries, through a database that may be restarting."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await op()
        except Exception as exc:
            if not database.only(exc, database.UNAVAILABLE) or time.monotonic() > deadline:
                raise
            await anyio.sleep(0.5)


@asynccontextmanager
async def _server(home: Path) -> AsyncIterator[tuple[str, Path | None]]:
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


async def chaos_cmd(args: argparse.Namespace) -> int:
    home = Path(tempfile.mkdtemp(prefix="props-chaos-"))
    held = False
    try:
        async with _server(home) as (server, server_home), \
                scratch.scratch_database(server, "chaos") as dsn, \
                open_store(dsn, max_connections=6) as store:
            chaos = Chaos(store, home, server_home, random.Random(args.seed))
            try:
                invariants = await run(chaos, args)
            finally:  # whatever happened, no replica outlives the run
                with anyio.CancelScope(shield=True):
                    await chaos.stop_services()
            if not args.restart_docker:
                invariants.append(Invariant("survives docker-restart", None,
                                            "not injected (--restart-docker): the engine "
                                            "may be shared with the machine"))
        held = all(i.held is not False for i in invariants)
    finally:
        if held:
            shutil.rmtree(home, ignore_errors=True)
        else:  # the services' logs (serve-N.log) say what went wrong
            console.print(f"kept for inspection: {home}")
    _print(chaos, invariants)
    return 0 if held else 1


async def run(chaos: Chaos, args: argparse.Namespace) -> list[Invariant]:
    store = chaos.store
    folder = samples.samples_dir()
    found = specimens.load_valid(folder)
    await specimen_sync.sync(store, str(folder), found)
    command = [sys.executable, "-c", CHAOS_AGENT]
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="chaos", tag="chaos", runtime="local", image="local:chaos",
        command=command, digest=definitions.local_digest(command, {})))
    hostile = hostile_critic.command()
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="hostile", tag="chaos", runtime="local",
        image="local:hostile", command=hostile, digest=definitions.local_digest(hostile, {})))
    critics = ["chaos"]
    if await docker_runtime.reachable():  # then every other run is a Docker container
        async with DockerRuntime.connect() as docker:
            image = await docker_runtime.build_reference_image(docker)
        await definitions.push(store, image.model_copy(update={
            "name": "chaos-docker", "tag": "chaos", "command": command}))
        critics.append("chaos-docker")
    slugs = sorted(s.slug for s in found)
    _, chaos.api_token = await tokens.create(store, "chaos", ("request", "read"))
    chaos.api_ports = [_free_port(), _free_port()]
    chaos.services = [None, None]
    for i in range(2):
        await chaos.start_service(i)
    stop_watch = anyio.Event()
    fault_times = sorted(chaos.rng.uniform(0.1, 0.9) * args.seconds
                         for _ in range(args.faults))
    chosen = FAULTS + (("restart-docker",) if args.restart_docker else ())
    kinds = [chosen[i % len(chosen)] for i in range(args.faults)]
    chaos.rng.shuffle(kinds)
    console.print(f"chaos: {args.runs} runs over {args.seconds:.0f} s, {args.faults} faults "
                  f"(seed {args.seed}), two `props serve` replicas; critics: "
                  f"{', '.join(critics)}")
    async with anyio.create_task_group() as tg:
        tg.start_soon(chaos.watch, stop_watch)

        async def load() -> None:
            async with httpx.AsyncClient(timeout=10) as client:
                for n in range(args.runs):
                    critic, snapshot = critics[n % len(critics)], slugs[n % len(slugs)]
                    if n % HOSTILE_EVERY == HOSTILE_EVERY - 1:
                        critic = "hostile"
                    if n % 4 >= 2:  # through the HTTP API
                        chaos.requested.append(await chaos.request_over_http(client, n, {
                            "definition": critic, "ref": "chaos", "snapshot": snapshot,
                            "model": f"m{n % 2}", "timeout_seconds": 60, "budget_usd": 0}))
                    else:
                        run_id = uuid.uuid4()
                        chaos.requested.append(run_id)
                        await _retry(lambda run_id=run_id, critic=critic,  # type: ignore[misc]
                                     snapshot=snapshot, n=n: store.append(
                            streams.run(run_id), [catalog.RunRequested(
                                run_id=run_id, agent_type="critic", definition=critic,
                                definition_ref="chaos", model=f"m{n % 2}", timeout_seconds=60,
                                budget_usd=0, example=catalog.Example(snapshot=snapshot),
                                requested_by="props chaos")]))
                    await anyio.sleep(args.seconds / args.runs)

        async def faults() -> None:
            t0 = time.monotonic()
            for at, kind in zip(fault_times, kinds, strict=True):
                await anyio.sleep(max(0.0, at - (time.monotonic() - t0)))
                await chaos.mark_prefix()
                detail = await chaos.inject(kind)
                chaos.faults.append((time.monotonic() - chaos.began, kind, detail))
                console.print(f"  {time.monotonic() - chaos.began:6.1f}s {kind}: {detail}")

        async with anyio.create_task_group() as load_tg:
            load_tg.start_soon(load)
            load_tg.start_soon(faults)
        console.print(f"load done after {time.monotonic() - chaos.began:.0f} s; draining ...")
        drained = await _drain(chaos, args.drain_seconds)
        await chaos.stop_services()
        await _caught_up_watch(chaos)
        stop_watch.set()
        tg.cancel_scope.cancel()
    return await check(chaos, drained)


async def _drain(chaos: Chaos, seconds: float) -> bool:
    store = chaos.store
    with anyio.move_on_after(seconds):
        while True:
            finished = await _retry(lambda: store.pool.fetchval(
                "SELECT count(DISTINCT stream_id) FROM props.events "
                "WHERE type = 'run.finished' AND stream_id = ANY($1::text[])",
                [streams.run(r) for r in chaos.requested]))
            pending = await _retry(lambda: store.pool.fetchval(
                "SELECT CASE WHEN to_regclass('projections.grading_pending') IS NULL THEN -1 "
                "ELSE (SELECT count(*) FROM projections.grading_pending) END"))
            status = await _retry(lambda: engine.status(store))
            if finished == len(chaos.requested) and pending == 0 \
                    and not any(s.lag_events for s in status):
                return True
            await anyio.sleep(0.5)
    return False


async def _caught_up_watch(chaos: Chaos) -> None:
    total = await _retry(lambda: chaos.store.pool.fetchval("SELECT count(*) FROM props.events"))
    with anyio.move_on_after(30):
        while True:
            if len(chaos.seen) >= total:
                return
            await anyio.sleep(0.1)


async def check(chaos: Chaos, drained: bool) -> list[Invariant]:
    store = chaos.store
    out = [Invariant("drained in time", drained, "every run finished, graded and projected"
                     if drained else "work was left when the drain time ran out")]
    finishes: dict[uuid.UUID, int] = {}
    containers: dict[uuid.UUID, int] = {}
    for run_id in chaos.requested:
        types = [r.type_name for r in await store.read_stream(streams.run(run_id))]
        finishes[run_id] = types.count("run.finished")
        containers[run_id] = types.count("container.started")
    wrong = [r for r, n in finishes.items() if n != 1]
    out.append(Invariant("every run in exactly one terminal state", not wrong,
                         f"{len(chaos.requested)} runs; {len(wrong)} with "
                         f"{sorted({finishes[r] for r in wrong}) or 'no'} finishes"))
    requests = [r.type_name for run_ids in chaos.api_answers.values() for run_id in run_ids
                for r in await store.read_stream(streams.run(run_id))
                if r.type_name == "run.requested"]
    split = [n for n, run_ids in chaos.api_answers.items() if len(run_ids) != 1]
    out.append(Invariant(
        "every API request is one run", bool(chaos.api_answers) and not split
        and len(requests) == len(chaos.api_answers),
        f"{len(chaos.api_answers)} requests over HTTP ({chaos.api_retries} retries after a "
        f"refused or lost answer), {len(requests)} run.requested events, {len(split)} "
        f"requests answered with two runs"))
    doubled = [r for r, n in containers.items() if n > 1]
    out.append(Invariant("no run with two containers", not doubled,
                         f"{len(doubled)} run(s) started more than one container"))
    ungraded = await store.pool.fetchval(
        "SELECT count(*) FROM projections.reported_issues i "
        "JOIN projections.agent_runs r USING (run_id) "
        "JOIN projections.active_scorer s ON true "
        "WHERE r.status IS NOT NULL AND r.finished_at IS NOT NULL AND NOT EXISTS ("
        "  SELECT 1 FROM projections.grading_edges e WHERE e.critique_run_id = i.run_id "
        "  AND e.critique_issue_id = i.issue_id AND e.scorer_name = s.name "
        "  AND e.scorer_version = s.version)")
    issues = await store.pool.fetchval("SELECT count(*) FROM projections.reported_issues")
    out.append(Invariant("every finished run fully graded by the active scorer",
                         ungraded == 0 and issues > 0,
                         f"{issues} issues, {ungraded} without a grade"))
    before = await engine.snapshot_rows(store)
    await engine.rebuild(store)
    after = await engine.snapshot_rows(store)
    differ = [t for t in before if before[t] != after[t]]
    out.append(Invariant("projections equal a clean rebuild", not differ,
                         f"{sum(len(v) for v in after.values())} rows; differing: "
                         f"{', '.join(differ) or 'none'}"))
    total = await store.pool.fetchval("SELECT count(*) FROM props.events")
    once = len(chaos.seen) == len(set(chaos.seen)) == total
    out.append(Invariant("the subscriber saw every event once", once,
                         f"{len(chaos.seen)} delivered, {len(set(chaos.seen))} distinct, "
                         f"{total} in the log"))
    lost = []
    for head, count, digest in chaos.prefixes:
        if await _prefix(store, head) != (count, digest):
            lost.append(head)
    out.append(Invariant("no event lost or changed", not lost,
                         f"{len(chaos.prefixes)} prefixes of the log re-hashed; "
                         f"{len(lost)} differ"))
    out.append(await _hostile(chaos))
    out.append(await _orphans(chaos))
    out.append(Invariant("no service process died on its own", not chaos.crashes,
                         "; ".join(c.splitlines()[0] for c in chaos.crashes) or
                         "every exit was a fault's SIGKILL or the final SIGTERM"))
    for crash in chaos.crashes:
        console.print(crash, style="red")
    for fault, why in NOT_INJECTED.items():
        out.append(Invariant(f"survives {fault}", None, f"not injected: {why}"))
    return out


async def _hostile(chaos: Chaos) -> Invariant:
    """Each hostile run ended failed (never completed), and what it reported of its tries
    (when it got that far: a fault may have killed it first) shows no breach."""
    runs = await chaos.store.pool.fetch(
        "SELECT r.stream_id FROM props.events r WHERE r.type = 'run.requested' "
        "AND r.data->>'definition' = 'hostile' AND r.stream_id = ANY($1::text[])",
        [streams.run(r) for r in chaos.requested])
    statuses: list[str] = []
    breaches: list[str] = []
    reported = 0
    for row in runs:
        for rec in await chaos.store.read_stream(row["stream_id"]):
            if isinstance(rec.event, catalog.RunFinished):
                statuses.append(rec.event.status)
            elif isinstance(rec.event, catalog.ContainerExited) and rec.event.logs_sha256:
                found = hostile_critic.report_in(
                    await chaos.store.get_blob(rec.event.logs_sha256))
                if found is not None:
                    reported += 1
                    breaches += found["breaches"]
    held = bool(runs) and statuses.count("completed") == 0 and not breaches and reported > 0
    return Invariant("hostile critics fail alone and breach nothing", held,
                     f"{len(runs)} hostile run(s), ended {sorted(set(statuses))}; "
                     f"{reported} reported their tries; breaches: "
                     f"{', '.join(sorted(set(breaches))) or 'none'}")


async def _orphans(chaos: Chaos) -> Invariant:
    ours = {str(r) for r in chaos.requested}
    local = LocalRuntime(chaos.home / "runs" / "local-containers")
    left = [n for n, v in (await local.names(LABEL)).items() if v in ours]
    if await docker_runtime.reachable():
        async with DockerRuntime.connect() as docker:
            left += [n for n, v in (await docker.names(LABEL)).items() if v in ours]
    roles = await chaos.store.pool.fetchval(
        "SELECT count(*) FROM pg_roles r JOIN props.agent_bindings b ON b.role_name = r.rolname"
        " WHERE b.run_id = ANY($1::uuid[])", list(chaos.requested))
    detail = f"{len(left)} container(s), {roles} role(s) left behind"
    for name in left[:3]:  # what their runs' logs say, for whoever reads the table
        types = [r.type_name for r in await chaos.store.read_stream(
            f"run-{name.removeprefix('props-run-')}")]
        detail += f"; {name[10:18]}: {' > '.join(t.split('.')[-1] for t in types[-4:])}"
    return Invariant("no orphan container or agent role", not left and roles == 0, detail)


def _print(chaos: Chaos, invariants: list[Invariant]) -> None:
    out = Console(highlight=False)
    faults = Table("at (s)", "fault", "what happened", title="faults injected")
    for at, kind, detail in chaos.faults:
        faults.add_row(f"{at:.1f}", kind, detail)
    out.print(faults)
    table = Table("invariant", "verdict", "detail", title="invariants")
    for i in invariants:
        table.add_row(i.name, i.verdict, i.detail)
    out.print(table)
    events = len(set(chaos.seen))
    out.print(f"{len(chaos.requested)} runs, {events} events, {len(chaos.faults)} faults; "
              + ("every invariant held" if all(i.held is not False for i in invariants)
                 else "AN INVARIANT BROKE"))

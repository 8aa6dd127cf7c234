"""Reactors: the runtime's guarantees, and the launcher and grader end to end on real
processes (the local runtime) and, where marked, real Docker containers."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import anyio.abc
import pytest

from props.core.domain import catalog, definitions
from props.core.log import database, retries
from props.core.log.events import RecordedEvent
from props.core.log.store import EventStore
from props.reactors import host as reactor_host
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.conftest import docker_or_skip
from tests.reactor_helpers import (
    QUICK_AGENT,
    eventually,
    finished,
    push_code,
    request,
    request_reference,
    serving,
    sync_samples,
)

# -- the runtime ----------------------------------------------------------------------------------


class Recorder:
    """A reactor that records what it handled and fails on phases named "poison"."""

    name = "recorder"
    types: tuple[str, ...] = ("phase.completed",)

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.attempts = 0

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        pass

    async def handle(self, rec: RecordedEvent) -> None:
        assert isinstance(rec.event, catalog.PhaseCompleted)
        self.attempts += 1
        if rec.event.phase == "poison":
            raise ValueError("cannot digest this")
        self.seen.append(rec.event.phase)


async def host_until(store: EventStore, host: reactor_host.ReactorHost, done: object) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.run)
        await eventually(done)  # type: ignore[arg-type]
        tg.cancel_scope.cancel()


class Flaky(Recorder):
    """Fails transiently (the database went away) as often as the phase's name says."""

    name = "flaky"

    async def handle(self, rec: RecordedEvent) -> None:
        assert isinstance(rec.event, catalog.PhaseCompleted)
        self.attempts += 1
        if self.seen.count(rec.event.phase) == 0 and self.attempts <= int(rec.event.phase[-1]):
            raise ConnectionResetError("the database went away")
        self.seen.append(rec.event.phase)
        self.attempts = 0


async def test_backoff_is_sized_per_event_not_by_the_hosts_history(
        store: EventStore, new_event: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event's transient retries start at the shortest wait again: after a few failures
    in a process's life, a later event's first retry does not wait the cap."""
    waits: list[int] = []

    def recorded(policy: retries.Policy, retry: int) -> float:
        if policy is retries.EVENT:
            waits.append(retry)
        return 0.0

    monkeypatch.setattr(retries.Policy, "delay", recorded)
    make = new_event
    await store.append("run-a", [make("a3"), make("b1"), make("c2")])  # type: ignore[operator]
    reactor = Flaky()
    host = reactor_host.ReactorHost(store, reactor, poll_interval=0.1)
    await host_until(store, host, lambda: reactor.seen == ["a3", "b1", "c2"])
    assert host.stats.retries == 6  # the host-wide count still counts them all
    assert waits == [1, 2, 3, 1, 1, 2]  # was [1, 2, 3, 4, 5, 6]: sized by that count


async def test_poison_event_is_parked_and_the_reactor_goes_on(store: EventStore,
                                                              new_event: object) -> None:
    make = new_event
    await store.append("run-a", [make("one"), make("poison"), make("two")])  # type: ignore[operator]
    reactor = Recorder()
    host = reactor_host.ReactorHost(store, reactor, poll_interval=0.1)
    await host_until(store, host, lambda: reactor.seen == ["one", "two"])
    parked = [r.event for r in await store.read_stream("reactor-recorder")]
    assert len(parked) == 1 and isinstance(parked[0], catalog.EventParked)
    assert parked[0].error_type == "ValueError" and parked[0].attempts == 3
    cp = await store.find_checkpoint(reactor_host.checkpoint_name("recorder"))
    assert cp is not None and cp.position >= 3


async def test_a_restarted_reactor_resumes_from_its_checkpoint(store: EventStore,
                                                               new_event: object) -> None:
    make = new_event
    await store.append("run-a", [make("one")])  # type: ignore[operator]
    first = Recorder()
    await host_until(store, reactor_host.ReactorHost(store, first, poll_interval=0.1),
                     lambda: first.seen == ["one"])
    await store.append("run-a", [make("two")])  # type: ignore[operator]
    second = Recorder()
    await host_until(store, reactor_host.ReactorHost(store, second, poll_interval=0.1),
                     lambda: second.seen == ["two"])
    assert second.seen == ["two"]  # "one" was not handled again


class Slow(Recorder):
    """Takes its time over each event: a stop arrives while one is in hand."""

    def __init__(self) -> None:
        super().__init__()
        self.in_hand = anyio.Event()

    async def handle(self, rec: RecordedEvent) -> None:
        self.in_hand.set()
        await anyio.sleep(0.5)
        await super().handle(rec)


async def test_a_stop_finishes_the_event_in_hand_and_records_it(store: EventStore,
                                                                new_event: object) -> None:
    """Cancelling the host waits for the event it is handling, never half-handles it, and
    records it: the next instance starts after it, not at it."""
    make = new_event
    await store.append("run-a", [make("one"), make("two"), make("three")])  # type: ignore[operator]
    first = Slow()
    async with anyio.create_task_group() as tg:
        tg.start_soon(reactor_host.ReactorHost(store, first, poll_interval=0.1).run)
        with anyio.fail_after(120):
            await first.in_hand.wait()
        tg.cancel_scope.cancel()  # while "one" is in hand
    assert first.seen == ["one"]
    second = Recorder()
    await host_until(store, reactor_host.ReactorHost(store, second, poll_interval=0.1),
                     lambda: second.seen == ["two", "three"])
    assert second.seen == ["two", "three"]  # "one" was recorded as handled


async def test_only_one_instance_of_a_reactor_is_active(store: EventStore,
                                                        new_event: object) -> None:
    make = new_event
    a, b = Recorder(), Recorder()
    host_a = reactor_host.ReactorHost(store, a, poll_interval=0.1)
    host_b = reactor_host.ReactorHost(store, b, poll_interval=0.1)
    serving_a = anyio.CancelScope()

    async def serve_a() -> None:
        with serving_a:
            await host_a.run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_a)
        with anyio.fail_after(120):
            await host_a.active.wait()
        tg.start_soon(host_b.run)
        await store.append("run-a", [make(f"p{i}") for i in range(20)])  # type: ignore[operator]
        await eventually(lambda: len(a.seen) == 20)
        assert not host_b.active.is_set() and b.seen == []
        serving_a.cancel()  # the active one goes: the standby takes over, without repeating work
        with anyio.fail_after(120):
            await host_b.active.wait()
        await store.append("run-a", [make("after")])  # type: ignore[operator]
        await eventually(lambda: b.seen == ["after"])
        tg.cancel_scope.cancel()


# -- the launcher and the grader ------------------------------------------------------------------


async def test_reference_critic_run_is_launched_reported_and_graded(served: EventStore) -> None:
    store = served
    await definitions.push(store, definitions.reference_local())
    run_id = uuid.uuid4()
    await store.append(f"run-{run_id}", [catalog.RunRequested(
        run_id=run_id, agent_type="critic", definition="reference", definition_ref="local",
        example=catalog.Example(snapshot="csvtool/2025-09-03-00"), model="ref",
        timeout_seconds=60, budget_usd=0)])
    done = await finished(store, [run_id])
    assert done[run_id].status == "completed"
    types = [r.type_name for r in await store.read_stream(f"run-{run_id}")]
    assert types[:4] == ["run.requested", "run.claimed", "run.started", "container.started"]
    assert types[-2:] == ["container.exited", "run.finished"]
    issues = types.count("issue.reported")
    assert issues >= 5 and "prompt.composed" in types and "phase.completed" in types
    async def graded() -> bool:
        return len([r for r in await store.read_stream(f"grading-{run_id}-tiered@2")
                    if not isinstance(r.event, catalog.GradesChance)]) == issues

    await eventually(graded)
    grades = [r.event for r in await store.read_stream(f"grading-{run_id}-tiered@2")]
    assert {g.tp_id for g in grades if isinstance(g, catalog.GradeEmitted) and g.tp_id} >= {
        "head-off-by-one", "file-handle-leak", "percentile-rank-overflow"}
    async def projected() -> bool:  # the projections follow, and nothing stays pending
        status = await store.pool.fetchval(
            "SELECT status FROM projections.agent_runs WHERE run_id = $1", run_id)
        pending = await store.pool.fetchval("SELECT count(*) FROM projections.grading_pending")
        return bool(status == "completed" and pending == 0)

    await eventually(projected)
    roles = await store.pool.fetch(
        "SELECT r.rolname FROM props.agent_bindings b LEFT JOIN pg_roles r "
        "ON r.rolname = b.role_name WHERE b.run_id = $1", run_id)
    assert len(roles) == 1 and roles[0][0] is None  # it had a role, gone with its run


FAILING_AGENTS = {
    "crash": ("import sys; sys.exit(3)", {}, ("failed", "exit_nonzero", 3)),
    "slow": ("import time; print('waiting', flush=True); time.sleep(60)", {},
             ("timed_out", "timeout", None)),
    "hungry": ("b = bytearray(600 * 1024 * 1024)", {"memory_mb": 128},
               ("failed", "out_of_memory", None)),
    "flood": ("from props.reactors.agents.sdk import Agent\n"
              "from props.core.domain import catalog\n"
              "with Agent.from_environment() as a:\n"
              "    for i in range(50): a.phase(f'p{i}')\n", {"max_events": 10},
              ("failed", "event_cap", None)),
    "liar": ("import os, psycopg, uuid\n"
             "c = psycopg.connect(os.environ['PROPS_AGENT_DSN'], autocommit=True)\n"
             "c.execute(\"SELECT agent.report(%s, 'issue.reported', '{\\\"issue_id\\\": 1}')\","
             " (uuid.uuid4(),))\n", {}, ("failed", "malformed_event", None)),  # killed or done
}


@pytest.mark.parametrize("kind", sorted(FAILING_AGENTS))
async def test_failing_agents_end_in_the_right_status_with_closed_facts(
        served: EventStore, kind: str) -> None:
    store = served
    code, limits, (status, category, exit_code) = FAILING_AGENTS[kind]
    await push_code(store, kind, code, config={"marker": "sk-SECRET-VALUE"}, **limits)
    # Only the slow agent is meant to run out of time: the others get a timeout no load
    # reaches, so each ends in its own failure, not in a timeout a busy machine caused.
    [run_id] = await request(store, kind, timeout_seconds=3 if kind == "slow" else 600)
    done = (await finished(store, [run_id]))[run_id]
    assert done.status == status
    assert (done.failure.category if done.failure else None) == category
    if exit_code is not None:
        assert done.failure is not None and done.failure.exit_code == exit_code
    records = await store.read_stream(f"run-{run_id}")
    assert [r.type_name for r in records].count("run.finished") == 1
    for rec in records:  # no secret in any event of the run, closed facts only
        assert "SECRET" not in catalog.REGISTRY.encode(rec.event)  # type: ignore[arg-type]
    if kind == "liar":  # the malformed report never reached the log
        assert "issue.reported" not in [r.type_name for r in records]
    if kind == "slow":  # a timed-out run keeps what its container printed
        [exited] = [r.event for r in records if isinstance(r.event, catalog.ContainerExited)]
        assert exited.logs_sha256 is not None
        assert b"waiting" in await store.get_blob(exited.logs_sha256)


async def test_cancel_stops_a_running_run(served: EventStore) -> None:
    store = served
    await push_code(store, "sleeper", "import time; time.sleep(60)")
    [run_id] = await request(store, "sleeper", timeout_seconds=60)
    async def started() -> bool:
        return "container.started" in [r.type_name for r in
                                        await store.read_stream(f"run-{run_id}")]

    await eventually(started)
    await store.append(f"run-{run_id}", [catalog.RunCancelRequested(run_id=run_id)])
    assert (await finished(store, [run_id]))[run_id].status == "cancelled"


async def test_unknown_definition_fails_the_run_with_a_reason(served: EventStore) -> None:
    [run_id] = await request(served, "nobody-pushed-this")
    done = (await finished(served, [run_id]))[run_id]
    assert done.status == "failed" and done.failure is not None
    assert done.failure.category == "definition_missing"


async def test_runs_over_capacity_wait_queued_and_all_finish(served: EventStore) -> None:
    store = served
    await push_code(store, "quick", QUICK_AGENT, config={"sleep": 0.2})
    ids = await request(store, "quick", count=20)
    done = await finished(store, ids)
    assert {d.status for d in done.values()} == {"completed"}


@pytest.mark.docker
async def test_reference_critic_in_docker(store: EventStore, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    async with docker_or_skip() as docker:
        definition = await docker_runtime.build_reference_image(docker)
        await definitions.push(store, definition)
        ids = await request(store, "reference")
        crash = catalog.DefinitionPushed(**{**definition.model_dump(), "name": "crash",
                                            "command": ["/bin/false"]})
        await definitions.push(store, crash)
        ids += await request(store, "crash")
        async with serving(store, [LocalRuntime(tmp_path / "c", trust_commands=True), docker]):
            done = await finished(store, ids)
        assert done[ids[0]].status == "completed"
        assert done[ids[1]].status == "failed" and done[ids[1]].failure is not None
        assert done[ids[1]].failure.exit_code == 1  # type: ignore[union-attr]
        started = [r.event for r in await store.read_stream(f"run-{ids[0]}")
                   if isinstance(r.event, catalog.ContainerStarted)]
        assert [s.runtime for s in started] == ["docker"]
        assert not [n for n, v in (await docker.names()).items() if v in map(str, ids)]


@pytest.mark.slow
async def test_launcher_killed_at_random_points_runs_each_run_once(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    """50 runs in flight; `props serve` SIGKILLed at random points and restarted. Every run
    ends in exactly one terminal state, got one container, and reported its issues once."""
    rng = random.Random(20261130)
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT, config={"sleep": 0.5, "issues": 3})
    ids = await request(store, "quick", count=50, timeout_seconds=120)
    env = {**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "props.tools.cli", "serve", "--only", "launcher",
           "--only", "grader", "--runtime", "local", "--max-concurrent", "8",
           "--trust-local-commands"]
    kills = 0
    for _ in range(6):
        proc = await anyio.open_process(cli, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        try:
            await anyio.sleep(rng.uniform(0.5, 2.5))
        finally:
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
        kills += 1
    proc = await anyio.open_process(cli, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
    try:
        done = await finished(store, ids, seconds=180)
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    assert kills == 6 and proc.returncode == 0
    assert {d.status for d in done.values()} == {"completed"}, {
        str(r): (d.status, d.failure) for r, d in done.items() if d.status != "completed"}
    for run_id in ids:
        types = [r.type_name for r in await store.read_stream(f"run-{run_id}")]
        assert types.count("run.finished") == 1
        assert types.count("container.started") == 1
        assert types.count("container.exited") == 1
        assert types.count("issue.reported") == 3  # reported once, appended once
    shims = list((tmp_path / "home" / "runs" / "local-containers").glob("*/claimed"))
    assert shims == []  # every container removed after its run


@pytest.mark.slow
async def test_reactors_finish_runs_across_a_database_restart(
        store: EventStore, server_dsn: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every connection of the service and of its agents is cut (as a server restart does)
    while runs are in flight: the reactors and the agents reconnect and finish the work."""
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT, config={"sleep": 1.0})
    ids = await request(store, "quick", count=6)
    database_name = database.url_parts(store.dsn)[2]
    async with serving(store, [LocalRuntime(tmp_path / "c", trust_commands=True)]):
        async with database.session(server_dsn) as admin:
            with anyio.fail_after(30):  # agents are connected: they lose theirs too
                while not await admin.fetchval(  # noqa: ASYNC110 - polls the server
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                        "AND application_name = 'props-agent'", database_name):
                    await anyio.sleep(0.02)
            cut = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()", database_name)
        assert cut > 0
        done = await finished(store, ids, seconds=120)
    assert {d.status for d in done.values()} == {"completed"}, {
        str(r): (d.status, d.failure) for r, d in done.items() if d.status != "completed"}


async def test_grader_containers_grade_what_the_in_process_grader_grades(
        served: EventStore) -> None:
    """The reference grader in containers (tiers, one to one) gives the very matches the
    in-process tiered@2 grader gives; a new grader digest stops the old one's runs and grades
    all history under its own version."""
    store = served
    await definitions.push(store, definitions.reference_local())
    ids = await request_reference(store, count=2)
    await finished(store, ids)
    grader = definitions.reference_local("grader")
    await definitions.push(store, grader)

    async def matches(ref: str) -> dict[tuple[uuid.UUID, str], tuple[object, ...]]:
        out: dict[tuple[uuid.UUID, str], tuple[object, ...]] = {}
        for run_id in ids:
            for r in await store.read_stream(f"grading-{run_id}-{ref}"):
                g = r.event
                if isinstance(g, catalog.GradesChance):  # the run's chance level
                    continue
                assert isinstance(g, catalog.GradeEmitted)
                out[(run_id, g.critique_issue_id)] = (g.tp_id, g.tp_occurrence, g.fp_id,
                                                     g.grade)
        return out

    issues = 0
    for run_id in ids:
        issues += [r.type_name for r in await store.read_stream(f"run-{run_id}")].count(
            "issue.reported")

    async def graded(ref: str) -> bool:
        return len(await matches(ref)) == issues

    await eventually(lambda: graded("reference-grader@1"), 60)
    await eventually(lambda: graded("tiered@2"), 60)
    assert await matches("reference-grader@1") == await matches("tiered@2")
    registered = [r.event for r in await store.read_stream("scorer-reference-grader")]
    assert [(e.version, e.code_hash) for e in registered  # type: ignore[union-attr]
            ] == [(1, grader.digest.removeprefix("sha256:"))]

    newer = definitions.reference_local("grader", config={"generation": 2})
    await definitions.push(store, newer)
    await eventually(lambda: graded("reference-grader@2"), 60)
    assert await matches("reference-grader@2") == await matches("tiered@2")
    grader_runs = [r for r in await store.read_all(limit=100_000)
                   if isinstance(r.event, catalog.RunRequested)
                   and r.event.agent_type == "grader"]
    assert len(grader_runs) >= 2 * 3  # one per snapshot per digest, at least
    done = await finished(store, [r.event.run_id for r in grader_runs])  # type: ignore[union-attr]
    assert {d.status for d in done.values()} <= {"completed", "cancelled"}


def test_the_reactor_names_are_the_reactors_own() -> None:
    """`props serve --only`, `props reactors status` and the hosts' locks use the names in
    `host.REACTORS`: they must be the names the reactors give themselves."""
    from props.core.domain.vocabulary import REACTORS, SERVICES
    from props.reactors.evaluation_reactor import EvaluationDriver
    from props.reactors.grader import Grader
    from props.reactors.launcher import launchers
    from props.reactors.supervisor import Supervisor

    # The unnamed launcher's reactor; named ones are launcher-NAME, beside it.
    assert REACTORS == (launchers.reactor_name(launchers.DEFAULT_NAME), Grader.name,
                        Supervisor.name, EvaluationDriver.name)
    assert SERVICES == (*REACTORS, "projections")

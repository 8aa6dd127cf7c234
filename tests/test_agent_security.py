"""An agent's role can report to its own run and do nothing else.

Each case connects as a real per-run role (created as the launcher creates it) and tries
something an agent must never do; each must be refused by PostgreSQL itself. A negative
control shows the same statements succeed as the service role, so the refusals are not
failures of some other kind."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import orjson
import pytest

from props.core.domain import caps, catalog
from props.core.log.store import EventStore
from props.reactors.launcher import agent_roles

FORBIDDEN_READS = [
    "SELECT * FROM props.events",
    "SELECT * FROM props.blobs",
    "SELECT * FROM props.agent_outbox",
    "SELECT * FROM props.agent_bindings",
    "SELECT * FROM props.checkpoints",
    "SELECT * FROM projections.agent_runs",
    "SELECT * FROM projections.ground_truth_tps",
]
FORBIDDEN_WRITES = [
    "UPDATE props.events SET type = 'x'",
    "DELETE FROM props.events",
    "INSERT INTO props.events (event_id, stream_id, stream_version, type, schema_version, "
    "data) VALUES (gen_random_uuid(), 'run-x', 1, 'issue.reported', 1, '{}')",
    "INSERT INTO props.agent_outbox (run_id, seq, event_id, type, data) VALUES "
    "(gen_random_uuid(), 1, gen_random_uuid(), 'issue.reported', '{}')",
    "UPDATE props.agent_bindings SET max_events = 1000000",
]


def issue(run_id: uuid.UUID, n: int = 1) -> str:
    return catalog.REGISTRY.encode(catalog.IssueReported(
        run_id=run_id, issue_id=f"i{n}", rationale="r",
        locations=[catalog.Location(file="a.py", ranges=[catalog.LineRange(start=1, end=2)])]))


@pytest.fixture
async def agent(store: EventStore) -> AsyncIterator[tuple[uuid.UUID, asyncpg.Connection]]:
    run_id = uuid.uuid4()
    limits = caps.Caps(max_events=5, max_bytes=100_000)
    creds = await agent_roles.create(store, run_id, limits)
    conn = await asyncpg.connect(agent_roles.agent_dsn(store.dsn, creds.role, creds.password))
    try:
        yield run_id, conn
    finally:
        await conn.close()
        await agent_roles.drop(store, run_id)


@pytest.mark.parametrize("sql", FORBIDDEN_READS + FORBIDDEN_WRITES)
async def test_agent_role_is_refused(agent: tuple[uuid.UUID, asyncpg.Connection],
                                     store: EventStore, sql: str) -> None:
    _, conn = agent
    await store.pool.execute("SELECT 1")  # the projections exist as the service sees them
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute(sql)


async def test_the_service_role_may_do_the_reads(store: EventStore) -> None:
    """Negative control: as the service, the reads above succeed (where the table exists),
    so the refusals are about privilege, not about broken statements."""
    for sql in FORBIDDEN_READS:
        if "projections." in sql:
            continue  # built by the projection runner, not by migrations
        await store.pool.fetch(sql)


async def test_agent_reports_land_in_its_own_run_only(
        agent: tuple[uuid.UUID, asyncpg.Connection], store: EventStore) -> None:
    run_id, conn = agent
    other = uuid.uuid4()
    # The agent names another run in its data: the binding decides, not the caller.
    assert await conn.fetchval("SELECT agent.report($1, 'issue.reported', $2::jsonb)",
                               uuid.uuid4(), issue(other))
    rows = await store.pool.fetch("SELECT run_id, data FROM props.agent_outbox")
    assert [r["run_id"] for r in rows] == [run_id]
    assert orjson.loads(rows[0]["data"])["run_id"] == str(run_id)


async def test_agent_cannot_report_lifecycle_events(
        agent: tuple[uuid.UUID, asyncpg.Connection]) -> None:
    run_id, conn = agent
    finished = catalog.REGISTRY.encode(catalog.RunFinished(run_id=run_id, status="completed"))
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="cannot report"):
        await conn.fetchval("SELECT agent.report($1, 'run.finished', $2::jsonb)",
                            uuid.uuid4(), finished)


async def test_agent_caps_refuse_floods_and_mark_the_run(
        agent: tuple[uuid.UUID, asyncpg.Connection], store: EventStore) -> None:
    run_id, conn = agent
    accepted = [await conn.fetchval("SELECT agent.report($1, 'issue.reported', $2::jsonb)",
                                    uuid.uuid4(), issue(run_id, n)) for n in range(8)]
    assert accepted == [True] * 5 + [False] * 3
    assert await conn.fetchval("SELECT agent.put_blob($1)", b"x") is None  # capped too
    b = await agent_roles.binding(store, run_id)
    assert b is not None and b.over_cap and b.events == 5


async def test_a_closed_binding_refuses_everything(
        agent: tuple[uuid.UUID, asyncpg.Connection], store: EventStore) -> None:
    run_id, conn = agent
    assert await conn.fetchval("SELECT agent.put_blob($1)", b"prompt bytes") is not None
    await store.pool.execute("UPDATE props.agent_bindings SET closed = true")
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="not bound"):
        await conn.fetchval("SELECT agent.report($1, 'issue.reported', $2::jsonb)",
                            uuid.uuid4(), issue(run_id))


async def test_dropped_role_cannot_connect(store: EventStore) -> None:
    run_id = uuid.uuid4()
    creds = await agent_roles.create(store, run_id, caps.Caps())
    dsn = agent_roles.agent_dsn(store.dsn, creds.role, creds.password)
    await (await asyncpg.connect(dsn)).close()
    await agent_roles.drop(store, run_id)
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError):
        await asyncpg.connect(dsn)


async def test_only_graders_report_grades(agent: tuple[uuid.UUID, asyncpg.Connection],
                                          store: EventStore) -> None:
    _critic_run, conn = agent  # a critic's role
    grade = catalog.REGISTRY.encode(catalog.GradeEmitted(
        critique_run_id=uuid.uuid4(), critique_issue_id="i1", grade=0.0,
        scorer=catalog.ScorerRef(name="g", version=1, code_hash="a" * 64,
                                 ground_truth_hash="b" * 64)))
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="critic agent cannot"):
        await conn.fetchval("SELECT agent.report($1, 'grade.emitted', $2::jsonb)",
                            uuid.uuid4(), grade)
    grader_run = uuid.uuid4()
    creds = await agent_roles.create(store, grader_run, caps.Caps(), "grader")
    grader = await asyncpg.connect(agent_roles.agent_dsn(store.dsn, creds.role,
                                                         creds.password))
    try:
        assert await grader.fetchval("SELECT agent.report($1, 'grade.emitted', $2::jsonb)",
                                     uuid.uuid4(), grade)
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="grader agent cannot"):
            await grader.fetchval("SELECT agent.report($1, 'issue.reported', $2::jsonb)",
                                  uuid.uuid4(), issue(grader_run))
    finally:
        await grader.close()
        await agent_roles.drop(store, grader_run)


async def test_roles_of_ended_runs_are_reaped_even_with_an_open_binding(
        store: EventStore) -> None:
    """A launcher killed between a run's finish and its clean-up leaves the role with an open
    binding: the reaper (at start and on every sweep) drops it once the log says the run
    ended, and leaves the roles of running runs alone."""
    ended, running = uuid.uuid4(), uuid.uuid4()
    names = [(await agent_roles.create(store, run_id, caps.Caps())).role
             for run_id in (ended, running)]
    await store.append(f"run-{ended}", [catalog.RunFinished(run_id=ended, status="completed")])
    roles = "SELECT rolname FROM pg_roles WHERE rolname = ANY($1::text[])"
    assert len(await store.pool.fetch(roles, names)) == 2
    assert await agent_roles.reap(store) == 1
    assert [r[0] for r in await store.pool.fetch(roles, names)] == [names[1]]
    await agent_roles.drop(store, running)

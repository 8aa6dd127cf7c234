"""What each role cannot do, tried as an attacker would (issue: agents cannot read the answer
key, forge the record or stop the service).

Agents: no large objects, advisory locks, NOTIFY or temp tables; short timeouts, enforced from
outside by the watchdog; role names that say nothing of the run; report ids that are their
own. The service role: appends and reads, but cannot disable the log's triggers, detach a
partition, write the side tables or restore. The owner: even it cannot rewrite the side
tables directly. Each refusal has a negative control showing the same statement works where
it should, so the refusal is about the role, not a broken statement.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import asyncpg
import pytest

from props.core.domain import caps, catalog
from props.core.domain.store import open_store
from props.core.log import database
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.reactors.launcher import agent_roles, run_state
from tests.conftest import as_role
from tests.reactor_helpers import eventually

AGENT_FORBIDDEN = [
    "SELECT lo_create(0)",
    "SELECT lo_from_bytea(0, 'x'::bytea)",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_try_advisory_lock(1)",
    "SELECT pg_advisory_xact_lock(1)",
    "SELECT pg_try_advisory_lock(1, 2)",
    "SELECT pg_notify('props_events', 'x')",
    "CREATE TEMP TABLE t (x int)",
]


async def connect_agent(store: EventStore, run_id: uuid.UUID,
                        agent_type: catalog.AgentType = "critic"
                        ) -> tuple[agent_roles.Credentials, asyncpg.Connection]:
    creds = await agent_roles.create(store, run_id, caps.Caps(), agent_type)
    conn = await asyncpg.connect(agent_roles.agent_dsn(store.dsn, creds.role, creds.password))
    return creds, conn


@pytest.fixture
async def agent(store: EventStore) -> AsyncIterator[tuple[uuid.UUID, asyncpg.Connection]]:
    run_id = uuid.uuid4()
    _creds, conn = await connect_agent(store, run_id)
    try:
        yield run_id, conn
    finally:
        await conn.close()
        await agent_roles.drop(store, run_id)


@pytest.fixture
async def service(store: EventStore) -> AsyncIterator[EventStore]:
    """The store as the service role (given a password here: the test server's own rules
    may ask for one)."""
    async with open_store(as_role(store.dsn, database.SERVICE_ROLE)) as s:
        yield s


@pytest.mark.parametrize("sql", AGENT_FORBIDDEN)
async def test_agents_cannot_take_what_the_service_needs(
        agent: tuple[uuid.UUID, asyncpg.Connection], sql: str) -> None:
    _, conn = agent
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute(sql)


@pytest.mark.parametrize("sql", [s for s in AGENT_FORBIDDEN if "lo_" not in s])
async def test_the_service_may_lock_notify_and_stage(service: EventStore, sql: str) -> None:
    """Negative control: as the service the same statements run."""
    async with service.pool.acquire() as conn, conn.transaction():
        await conn.execute(sql)


async def test_agent_role_names_say_nothing_of_the_run(store: EventStore) -> None:
    run_id = uuid.uuid4()
    creds, conn = await connect_agent(store, run_id)
    await conn.close()
    try:
        assert creds.role.startswith(agent_roles.ROLE_PREFIX)
        assert run_id.hex not in creds.role and str(run_id) not in creds.role
        again = await agent_roles.create(store, run_id, caps.Caps())
        assert again == creds and again.password == creds.password  # adopted, not re-keyed
        assert await agent_roles.role_of(store, run_id) == creds.role
    finally:
        await agent_roles.drop(store, run_id)


async def test_agent_roles_have_short_timeouts(
        agent: tuple[uuid.UUID, asyncpg.Connection]) -> None:
    _, conn = agent
    assert await conn.fetchval("SHOW statement_timeout") == "5s"
    assert await conn.fetchval("SHOW idle_in_transaction_session_timeout") == "5s"
    assert await conn.fetchval("SHOW work_mem") == "1MB"
    if int(await conn.fetchval("SHOW server_version_num")) >= 170000:
        assert await conn.fetchval("SHOW transaction_timeout") == "10s"
    with pytest.raises(asyncpg.QueryCanceledError):
        await conn.execute("SELECT pg_sleep(6)")


async def test_the_watchdog_ends_a_transaction_held_open(store: EventStore) -> None:
    """An agent may SET its timeouts away and keep a transaction (and the fence) open with
    short statements: the watchdog ends its session from outside; an idle session is left."""
    holder_run, idle_run = uuid.uuid4(), uuid.uuid4()
    creds, holder = await connect_agent(store, holder_run)
    _, idle = await connect_agent(store, idle_run)
    # A hardened server gives agents no way to take a transaction id by hand (they take one
    # inside agent.report): granted back here to hold one for as long as the test likes.
    await store.pool.execute(f'GRANT EXECUTE ON FUNCTION pg_current_xact_id() TO "{creds.role}"')
    try:
        await holder.execute("SET statement_timeout = 0; "
                             "SET idle_in_transaction_session_timeout = 0")
        await holder.execute("BEGIN")
        await holder.fetchval("SELECT pg_current_xact_id()")
        pid = holder.get_server_pid()
        await anyio.sleep(1.2)
        ended = await store.pool.fetchval("SELECT props.end_agent_overruns(60, 1)")
        assert ended == 1

        async def gone() -> bool:
            return not await store.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)

        await eventually(gone, 10)  # the signal takes a moment to land
        assert await idle.fetchval("SELECT 1") == 1  # not in a transaction: left alone
        assert await agent_roles.end_overruns(store) == 0
    finally:
        holder.terminate()
        await idle.close()
        for run in (holder_run, idle_run):
            await agent_roles.drop(store, run)


async def test_two_runs_may_report_the_same_id_and_never_the_launchers(
        store: EventStore) -> None:
    runs = [uuid.uuid4(), uuid.uuid4()]
    shared = run_state.lifecycle_id(runs[1], "finished")  # the launcher's id of run 2's end
    for run_id in runs:
        await store.append(f"run-{run_id}", [NewEvent(catalog.PhaseCompleted(
            run_id=run_id, phase="setup", duration_seconds=0.0), uuid.uuid4())])
        _, conn = await connect_agent(store, run_id)
        issue = catalog.REGISTRY.encode(catalog.IssueReported(
            run_id=run_id, issue_id="i1", rationale="r",
            locations=[catalog.Location(file="a.py",
                                        ranges=[catalog.LineRange(start=1, end=2)])]))
        assert await conn.fetchval("SELECT agent.report($1, 'issue.reported', $2::jsonb)",
                                   shared, issue)
        await conn.close()
    for run_id in runs:
        stored = {r.event_id for r in await store.read_stream(f"run-{run_id}")}
        totals = await agent_roles.drain(store, run_id, stored, agent_roles.Drained())
        assert totals.appended == 1 and totals.malformed is None
    ids = [[r.event_id for r in await store.read_stream(f"run-{run_id}")
            if r.type_name == "issue.reported"] for run_id in runs]
    assert len(ids[0]) == len(ids[1]) == 1  # neither dropped
    assert ids[0][0] != ids[1][0] and shared not in (ids[0][0], ids[1][0])
    assert ids[0][0] == agent_roles.report_id(runs[0], shared)
    for run_id in runs:
        await agent_roles.drop(store, run_id)


async def test_a_role_that_cannot_be_dropped_is_reported_and_retried(
        store: EventStore) -> None:
    run_id = uuid.uuid4()
    creds = await agent_roles.create(store, run_id, caps.Caps())
    # What a large object did before agents lost lo_create: the role owns something.
    oid = await store.pool.fetchval("SELECT lo_create(0)")
    await store.pool.execute(f"ALTER LARGE OBJECT {oid} OWNER TO {creds.role}")
    await store.append(f"run-{run_id}", [catalog.RunFinished(run_id=run_id,
                                                             status="completed")])
    assert await agent_roles.drop(store, run_id) is False
    assert await agent_roles.reap(store) == 0  # still there, and nothing raised
    await store.pool.execute(f"SELECT lo_unlink({oid})")
    assert await agent_roles.reap(store) == 1
    assert await store.pool.fetchval("SELECT count(*) FROM pg_roles WHERE rolname = $1",
                                     creds.role) == 0


SERVICE_REFUSED = [
    "ALTER TABLE props.events DISABLE TRIGGER events_append_only",
    "ALTER TABLE props.events DETACH PARTITION props.events_000000000000001",
    "DROP TABLE props.events_000000000000001",
    "UPDATE props.streams SET version = 1",
    "DELETE FROM props.event_ids",
    "TRUNCATE props.streams",
    "UPDATE props.log_partitions SET state = 'archived'",
    "DELETE FROM props.log_partitions",
    "INSERT INTO props.event_ids VALUES (gen_random_uuid(), 1)",
    "SELECT props.restore_partition('events_000000000000001')",
    "SELECT props.make_partition('x', 1, 2)",
    "UPDATE props.events SET type = 'x'",
    "SELECT * FROM props.restoring",
]


@pytest.mark.parametrize("sql", SERVICE_REFUSED)
async def test_the_service_role_owns_nothing(service: EventStore, sql: str) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await service.pool.execute(sql)


async def test_the_service_role_runs_the_log(service: EventStore, store: EventStore) -> None:
    """Negative control: appends (the triggers keep the side tables for it), reads, agent
    roles made and dropped, projection tables made, all as the service."""
    run_id = uuid.uuid4()
    await service.append(f"run-{run_id}", [catalog.PhaseCompleted(
        run_id=run_id, phase="x", duration_seconds=0.0)])
    await service.append(f"run-{run_id}", [catalog.RunFinished(run_id=run_id,
                                                               status="completed")])
    assert [r.type_name for r in await service.read_stream(f"run-{run_id}")] == \
        ["phase.completed", "run.finished"]
    creds = await agent_roles.create(service, uuid.uuid4(), caps.Caps())
    assert creds.role.startswith(agent_roles.ROLE_PREFIX)
    assert await agent_roles.reap(service) == 0
    await service.pool.execute("CREATE TABLE projections.scratch (x int)")
    assert await store.pool.fetchval(
        "SELECT tableowner FROM pg_tables WHERE tablename = 'scratch'") == \
        database.SERVICE_ROLE


@pytest.mark.parametrize("sql", [
    "UPDATE props.streams SET version = version + 1",
    "DELETE FROM props.event_ids",
    "INSERT INTO props.streams VALUES ('run-x', 5, pg_current_xact_id())",
    "TRUNCATE props.event_ids",
    "TRUNCATE props.log_partitions",
    "UPDATE props.log_partitions SET state = 'archived'",
    "UPDATE props.log_partitions SET to_position = to_position + 1",
    "DELETE FROM props.log_partitions",
])
async def test_even_the_owner_cannot_rewrite_the_side_tables(store: EventStore,
                                                             sql: str) -> None:
    await store.append("run-x", [catalog.PhaseCompleted(run_id=uuid.UUID(int=1), phase="x",
                                                        duration_seconds=0.0)])
    with pytest.raises(asyncpg.PostgresError) as refused:
        await store.pool.execute(sql)
    assert refused.value.sqlstate == "PX001"


async def test_a_session_setting_skips_no_check(store: EventStore) -> None:
    """`SET LOCAL props.restoring = 'on'` used to skip the stream and id checks."""
    await store.append("run-y", [catalog.PhaseCompleted(run_id=uuid.UUID(int=1), phase="x",
                                                        duration_seconds=0.0)])
    async with store.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL props.restoring = 'on'")
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.execute(
                "INSERT INTO props.events (event_id, stream_id, stream_version, type, "
                "schema_version, data) VALUES (gen_random_uuid(), 'run-y', 7, "
                "'phase.completed', 1, '{}')")
    assert refused.value.sqlstate == "PX409"


# -- forged rows, and analysts who would stall everyone -----------------------------------------

@pytest.mark.parametrize("forged", [
    ("tx_id, ", "'5'::xid8, "),
    ("recorded_at, ", "'2000-01-01'::timestamptz, "),
])
async def test_no_role_gives_a_row_its_transaction_or_time(
        service: EventStore, forged: tuple[str, str]) -> None:
    column, value = forged
    insert = (f"INSERT INTO props.events ({column}event_id, stream_id, stream_version, type, "
              f"schema_version, data) VALUES ({value}$1, $2, 1, 'phase.completed', 1, "
              f"'{{}}'::jsonb)")
    with pytest.raises(asyncpg.PostgresError, match="sets tx_id, recorded_at"):
        await service.pool.execute(insert, uuid.uuid4(), f"run-{uuid.uuid4()}")
    # Negative control: the same insert without the forged column is taken.
    plain = insert.replace(column, "").replace(value, "")
    assert await service.pool.execute(plain, uuid.uuid4(), f"run-{uuid.uuid4()}") == \
        "INSERT 0 1"


async def test_no_role_gives_a_row_its_position(service: EventStore) -> None:
    insert = ("INSERT INTO props.events (global_position, event_id, stream_id, stream_version,"
              " type, schema_version, data) OVERRIDING SYSTEM VALUE VALUES ($3, $1, $2, 1, "
              "'phase.completed', 1, '{}'::jsonb)")
    async with service.pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
        for position in (1, 10_000_000):  # a hole (or a position past) and one in the future
            with pytest.raises(asyncpg.PostgresError):
                await conn.execute(insert, uuid.uuid4(), f"run-{uuid.uuid4()}", position)
    assert not await service.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE global_position IN (1, 10000000)")


async def test_an_analyst_cannot_hold_the_fence(store: EventStore) -> None:
    """The analyst is read-only, has no TEMP, cannot take a transaction id; one who SETs the
    read-only default away still cannot, and the watchdog would end it past its limit."""
    # A database made from a template has TEMP for everyone again, until the first launch.
    await store.pool.execute("SELECT props.keep_temp_from_agents()")
    analyst = await asyncpg.connect(as_role(store.dsn, database.ANALYST_ROLE))
    try:
        assert await analyst.fetchval("SHOW default_transaction_read_only") == "on"
        assert await analyst.fetchval("SHOW idle_in_transaction_session_timeout") == "30s"
        for sql in ["SELECT pg_current_xact_id()", "SELECT txid_current()",
                    "CREATE TEMP TABLE t (x int)", "SELECT pg_advisory_lock(1)"]:
            await analyst.execute("SET default_transaction_read_only = off")
            with pytest.raises(asyncpg.PostgresError):
                await analyst.execute(sql)
                pytest.fail(f"the analyst could: {sql}")
        assert await analyst.fetchval("SELECT 1") == 1  # (it reads)
    finally:
        await analyst.close()


async def test_the_watchdog_ends_an_analyst_holding_the_fence(store: EventStore) -> None:
    """Were an analyst to get a transaction id (a server not hardened: granted back here by
    the owner), the watchdog ends it; an analyst reading without one is left alone."""
    await store.pool.execute("GRANT EXECUTE ON FUNCTION pg_current_xact_id() TO props_analyst")
    holder = await asyncpg.connect(as_role(store.dsn, database.ANALYST_ROLE))
    reader = await asyncpg.connect(as_role(store.dsn, database.ANALYST_ROLE))
    try:
        await holder.execute("SET idle_in_transaction_session_timeout = 0")
        await holder.execute("BEGIN")
        await holder.fetchval("SELECT pg_current_xact_id()")
        await reader.execute("BEGIN")
        await reader.fetchval("SELECT count(*) FROM pg_stat_activity")
        pid = holder.get_server_pid()
        await anyio.sleep(1.2)
        assert await store.pool.fetchval("SELECT props.end_analyst_fence_holds(1)") == 1

        async def gone() -> bool:
            return not await store.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)

        await eventually(gone, 10)
        assert await reader.fetchval("SELECT 1") == 1
    finally:
        holder.terminate()
        await reader.close()
        await store.pool.execute(
            "REVOKE EXECUTE ON FUNCTION pg_current_xact_id() FROM props_analyst")

"""What one agent (a critic or grader) can take from the server, tried as an attacker would
(issue 43): sessions, disk, memory settings, NOTIFY. Each limit has its negative control:
the same statement works where it should, so the refusal is the limit's."""

from __future__ import annotations

import uuid

import anyio
import asyncpg
import pytest

from props.core.domain import catalog
from props.core.log.checkpoints import START
from props.core.log.store import EventStore
from props.reactors.launcher import agent_roles
from tests.reactor_helpers import SNAPSHOT, eventually
from tests.test_roles import agent, connect_agent  # noqa: F401 (a fixture)

# A sort of 3 million short texts: some 100 MB spilled at work_mem 64kB, over the 64 MB cap.
SPILLING_SORT = ("SELECT max(x) FROM (SELECT g::text || 'padding' AS x "
                 "FROM generate_series(1, 3000000) g ORDER BY 1) s")


async def _gone(store: EventStore, pid: int) -> bool:
    return not await store.pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)


async def test_an_agent_role_opens_one_session(store: EventStore) -> None:
    """The SDK holds one connection; a second session of the role is refused (the probe
    opened 4, each a server process it could grow). Negative control: once the first is
    closed, the role logs in again."""
    run_id = uuid.uuid4()
    creds, first = await connect_agent(store, run_id)
    dsn = agent_roles.agent_dsn(store.dsn, creds.role, creds.password)
    try:
        with pytest.raises(asyncpg.TooManyConnectionsError):
            extra = await asyncpg.connect(dsn)
            await extra.close()  # (today's code: it logs in)
        pid = first.get_server_pid()
        await first.close()
        await eventually(lambda: _gone(store, pid), 10)
        again = await asyncpg.connect(dsn)
        assert await again.fetchval("SELECT 1") == 1
        await again.close()
    finally:
        first.terminate()
        await agent_roles.drop(store, run_id)


async def test_an_agent_cannot_spill_past_its_temp_file_limit(
        store: EventStore, agent: tuple[uuid.UUID, asyncpg.Connection]) -> None:  # noqa: F811
    """A sort spilling ~100 MB to disk fails at the role's 64 MB `temp_file_limit`, which
    the agent cannot SET away (a superuser's setting). Negative control: the owner runs the
    same sort to the end."""
    _, conn = agent
    assert await conn.fetchval("SHOW temp_file_limit") == "64MB"
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("SET temp_file_limit = -1")
    await conn.execute("SET statement_timeout = '120s'; SET work_mem = '64kB'")
    with pytest.raises(asyncpg.ConfigurationLimitExceededError, match="temp_file_limit"):
        await conn.fetchval(SPILLING_SORT)
    async with store.pool.acquire() as owner, owner.transaction():
        await owner.execute("SET LOCAL work_mem = '64kB'")
        assert str(await owner.fetchval(SPILLING_SORT)).endswith("padding")


async def test_a_forged_notify_flood_changes_nothing(
        store: EventStore, agent: tuple[uuid.UUID, asyncpg.Connection]) -> None:  # noqa: F811
    """`pg_notify()` is revoked, but NOTIFY needs no privilege: an agent floods the log's
    channel with 2,000 notifications with payloads. The subscription hears them (so the
    flood arrived) and reads nothing: a notification is a hint, the log is read through the
    fence whatever it says. Negative control: a real append, after the flood, is delivered."""
    _, conn = agent
    await conn.execute("SET statement_timeout = '60s'")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("SELECT pg_notify('props_events', 'x')")
    head = await store.pool.fetchval("SELECT count(*) FROM props.events")
    delivered: list[str] = []
    async with store.subscribe(START, poll_interval=60) as sub:

        async def follow() -> None:
            async for batch in sub:
                delivered.extend(e.stream_id for e in batch)

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await eventually(lambda: len(delivered) == head, 30)  # caught up
            await conn.execute("DO $$ BEGIN FOR i IN 1..2000 LOOP EXECUTE format("
                               "'NOTIFY props_events, %L', 'forged ' || i); END LOOP; END $$")
            await eventually(lambda: sub.notifications >= 2000, 30)
            assert len(delivered) == head
            assert await store.pool.fetchval("SELECT count(*) FROM props.events") == head
            run = uuid.uuid4()
            await store.append(f"run-{run}", [catalog.RunRequested(
                run_id=run, agent_type="critic", definition="reference",
                example=catalog.Example(snapshot=SNAPSHOT), model="m", timeout_seconds=60,
                budget_usd=0)])
            await eventually(lambda: len(delivered) == head + 1, 30)
            tg.cancel_scope.cancel()
    assert delivered[-1] == f"run-{run}"


async def test_a_listener_holding_the_notify_queue_is_ended(
        store: EventStore, agent: tuple[uuid.UUID, asyncpg.Connection]) -> None:  # noqa: F811
    """An agent that LISTENs and stops reading (here: stays in a transaction) holds the
    server's notification queue; once it is full, every append (which notifies) fails. Past
    the share the watchdog allows, the agent's session is ended. Negative control: below the
    share nothing is ended."""
    _, conn = agent
    await conn.execute("SET idle_in_transaction_session_timeout = 0")
    await conn.add_listener("anything", lambda *_: None)
    await conn.execute("BEGIN")
    await conn.fetchval("SELECT 1")
    pid = conn.get_server_pid()
    await store.pool.execute("SELECT pg_notify('anything', repeat('x', 7900) || g) "
                             "FROM generate_series(1, 40) g")
    assert await store.pool.fetchval("SELECT pg_notification_queue_usage()") > 0
    assert await store.pool.fetchval("SELECT props.end_notify_queue_holders(0.5)") == 0
    assert await conn.fetchval("SELECT 1") == 1  # left alone below the share
    assert await store.pool.fetchval("SELECT props.end_notify_queue_holders(0)") == 1
    await eventually(lambda: _gone(store, pid), 10)

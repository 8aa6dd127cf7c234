"""A rebuild's swap and the analysts' transactions that hold the live tables (issue 43): an
analyst running short statements in one long transaction held `projections rebuild` and
`retry-parked` back for as long as they liked. The swap now waits a stated grace, then ends
those sessions and says which."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import asyncpg
import pytest

from props.core.log import database
from props.core.log.store import EventStore
from props.projections import engine
from tests.conftest import as_role
from tests.test_projections import every_kind_of_event

CLI = [sys.executable, "-m", "props.tools.cli"]


async def _analyst(store: EventStore) -> asyncpg.Connection:
    return await asyncpg.connect(as_role(store.dsn, database.ANALYST_ROLE))


async def _holding(store: EventStore) -> asyncpg.Connection:
    """An analyst in one long transaction of short reads (its idle timeout SET away)."""
    conn = await _analyst(store)
    await conn.execute("SET idle_in_transaction_session_timeout = 0")
    await conn.execute("BEGIN")
    await conn.fetchval("SELECT count(*) FROM projections.agent_runs")
    await conn.fetchval("SELECT count(*) FROM projections.model_scores")  # (a view)
    return conn


async def test_the_swap_ends_a_long_analyst_transaction_after_the_grace(
        store: EventStore) -> None:
    """The holder is ended once the grace is over, and the rebuild says so; an analyst who
    read outside a transaction is left alone, and so is everyone when nobody holds the
    tables (negative controls: a rebuild without a holder ends nobody)."""
    await every_kind_of_event(store, runs=3)
    await engine.rebuild(store)
    quiet = await engine.rebuild(store, reader_grace=0)
    assert quiet.readers_ended == []
    idle = await _analyst(store)
    holder = await _holding(store)
    try:
        # (Counts are not compared: the fence is the server's, and another database's long
        # transaction on a shared test server may hold what a rebuild sees.)
        assert await idle.fetchval("SELECT count(*) FROM projections.agent_runs") >= 0
        report = await engine.rebuild(store, reader_grace=1)
        assert [(r.pid, r.role) for r in report.readers_ended] == \
            [(holder.get_server_pid(), database.ANALYST_ROLE)]
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await holder.fetchval("SELECT 1")
        assert await idle.fetchval("SELECT count(*) FROM projections.agent_runs") >= 0
    finally:
        holder.terminate()
        await idle.close()


async def test_rebuild_says_whom_it_ended(store: EventStore) -> None:
    """`props projections rebuild --reader-grace 1` prints one line naming the session it
    ended; a grace that is not a number of seconds is a usage error (exit 2) before anything
    is done, for `retry-parked` (which rebuilds through the same swap) too."""
    await every_kind_of_event(store, runs=2)
    await engine.rebuild(store)
    env = {**os.environ, "PROPS_DSN": store.dsn}
    for command, bad in [("rebuild", "-1"), ("rebuild", "nan"), ("rebuild", "inf"),
                         ("rebuild", "soon"), ("retry-parked", "86401")]:
        refused = await anyio.run_process(
            [*CLI, "projections", command, "--all", "--reader-grace", bad], env=env,
            check=False)
        assert refused.returncode == 2, refused.stderr
        assert b"--reader-grace" in refused.stderr
    holder = await _holding(store)
    try:
        done = await anyio.run_process(
            [*CLI, "projections", "rebuild", "--all", "--reader-grace", "1"], env=env,
            check=False, stderr=subprocess.STDOUT)
        out = done.stdout.decode()
        assert done.returncode == 0, out
        [line] = [x for x in out.splitlines() if x.startswith("ended ")]
        assert f"pid {holder.get_server_pid()} ({database.ANALYST_ROLE})" in line
        assert "1 s reader grace" in line
    finally:
        holder.terminate()

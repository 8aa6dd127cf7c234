"""Migrations: from empty equals schema/schema.sql; drift and newer databases are refused."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import anyio
import pytest

from props.core.domain.store import open_store
from props.core.log import database, errors, migrate
from props.core.log.store import EventStore
from props.schema import catalog_dump


def declared() -> str:
    return resources.files("props.schema").joinpath("schema.sql").read_text()


async def test_migrating_from_empty_gives_the_declared_schema(empty_dsn: str) -> None:
    async with database.session(empty_dsn) as conn:
        applied = await migrate.migrate(conn)
        assert [m.name for m in applied] == [m.name for m in migrate.available()]
        assert await catalog_dump.describe(conn) == declared()


async def test_schema_comparison_sees_a_missing_index(dsn: str) -> None:
    """Negative control: the comparison above can fail."""
    async with database.session(dsn) as conn:
        await conn.execute("DROP INDEX props.events_category_fence_idx")
        described = await catalog_dump.describe(conn)
    assert described != declared()
    assert "events_category_fence_idx" in declared()
    assert "events_category_fence_idx" not in described


# Negative controls of what the declared schema covers beyond tables (each went unseen when it
# held tables, indexes and a hash of each body only, and neither the `agent` schema nor grants):
# a statement a migration might run by mistake, and a line of the description it changes.
CHANGES = {
    "a grant": ("GRANT SELECT ON props.agent_outbox TO props_analyst",
                "GRANT SELECT ON TABLE props.agent_outbox TO props_analyst;"),
    "a revoked grant": (
        "REVOKE EXECUTE ON FUNCTION agent.put_blob(bytea) FROM props_agent",
        "GRANT EXECUTE ON FUNCTION agent.put_blob(p_content bytea) TO props_agent;"),
    "an agent-schema object": (
        "CREATE FUNCTION agent.peek() RETURNS bigint LANGUAGE sql "
        "AS 'SELECT count(*) FROM props.events'",
        "CREATE OR REPLACE FUNCTION agent.peek()"),
    "a default privilege": (
        "ALTER DEFAULT PRIVILEGES IN SCHEMA agent GRANT EXECUTE ON FUNCTIONS TO props_agent",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA agent GRANT EXECUTE ON FUNCTIONS TO props_agent;"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
async def test_schema_comparison_sees_grants_and_the_agent_schema(dsn: str, change: str) -> None:
    statement, line = CHANGES[change]
    async with database.session(dsn) as conn:
        await conn.execute(statement)
        described = await catalog_dump.describe(conn)
    assert described != declared()
    # the line appears in exactly one of the two: added by the change, or taken away by it
    assert (line in described) != (line in declared())


async def test_schema_comparison_sees_a_changed_function_body(dsn: str) -> None:
    """Negative control: the same function with one more statement in its body differs (a hash
    of the body saw it too; the body itself is now in the file, for the reviewer to read)."""
    async with database.session(dsn) as conn:
        definition = await conn.fetchval(
            "SELECT pg_get_functiondef('agent.report(uuid, text, jsonb)'::regprocedure)")
        opening = "AS $function$\n"
        assert opening in definition
        await conn.execute(definition.replace(opening, opening + "-- changed\n", 1))
        described = await catalog_dump.describe(conn)
    assert described != declared()
    assert "-- changed" in described and "-- changed" not in declared()


async def test_migrate_twice_and_concurrently_applies_each_once(empty_dsn: str) -> None:
    results: list[int] = []

    async def one() -> None:
        results.append(len(await migrate.migrate_database(empty_dsn)))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    assert sorted(results) == [0, 0, len(migrate.available())]
    await one()
    assert results[-1] == 0


async def test_changed_migration_is_refused(dsn: str) -> None:
    async with database.session(dsn) as conn:
        await conn.execute("UPDATE props_meta.migrations SET sha256 = 'x' WHERE version = 1")
        with pytest.raises(errors.SchemaError, match=r"0001_log\.sql was changed after it was"):
            await migrate.migrate(conn)
        states = await migrate.status(conn)
        assert states[0].state == "changed"


async def test_database_from_a_newer_props_is_refused(dsn: str) -> None:
    async with database.session(dsn) as conn:
        await conn.execute(
            "INSERT INTO props_meta.migrations (version, name, sha256) "
            "VALUES (999, '0999_future.sql', 'f')"
        )
        with pytest.raises(errors.SchemaError, match="newer props"):
            await migrate.migrate(conn)


async def test_store_on_unmigrated_database_says_what_to_run(empty_dsn: str) -> None:
    with pytest.raises(errors.SchemaError, match="props db migrate"):
        async with open_store(empty_dsn):
            pass


@pytest.mark.parametrize("statement", [
    "UPDATE props.events SET type = 'x'",
    "DELETE FROM props.events",
    "TRUNCATE props.events",
    "UPDATE props.blobs SET size = 0",
    "DELETE FROM props.blobs",
    "TRUNCATE props.blobs",
])
async def test_log_is_append_only(store: EventStore, statement: str,
                                  new_event: Callable[..., object]) -> None:
    await store.append("run-x", [new_event()])  # type: ignore[list-item]
    await store.put_blob(b"kept")
    with pytest.raises(Exception, match="append-only") as info:
        await store.pool.execute(statement)
    assert getattr(info.value, "sqlstate", None) == "PX001"
    assert await store.pool.fetchval("SELECT count(*) FROM props.events") == 1
    assert await store.get_blob(await store.put_blob(b"kept")) == b"kept"


def test_the_declared_schema_is_what_the_command_gives(dsn: str) -> None:
    """schema/schema.sql is `props db schema --from-migrations`'s output (a scratch database of
    the server, migrated from empty): the file is regenerated by a command, never by hand.
    The control: the database in hand, changed, describes otherwise, while the command still
    gives the file (it reads the migrations, not this database)."""
    import os
    import subprocess
    import sys

    def schema(*flags: str) -> str:
        done = subprocess.run([sys.executable, "-m", "props.tools.cli", "db", "schema", *flags],
                              capture_output=True, text=True, timeout=600, check=False,
                              env={**os.environ, "PROPS_DSN": dsn})
        assert done.returncode == 0, done.stderr
        return done.stdout

    async def drop_an_index() -> None:
        async with database.session(dsn) as conn:
            await conn.execute("DROP INDEX props.events_category_fence_idx")

    anyio.run(drop_an_index)
    assert schema() != declared()
    assert schema("--from-migrations") == declared()

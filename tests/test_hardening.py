"""`props db harden`: on a server whose props schema was migrated by an owner that is not a
superuser (so nothing of PostgreSQL's own could be revoked), a superuser's harden takes from
agents and analysts what the migration could not, and `props db status` then shows it gone."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import anyio
import pytest
from psycopg import sql

from props.core.log import database, migrate
from tests.conftest import SESSION, TEST_ROLE_PASSWORD, _admin, create_database, drop_database

CLI = [sys.executable, "-m", "props.tools.cli"]
GUARDED = "SELECT has_function_privilege('public', 'lo_create(oid)', 'EXECUTE')"


@pytest.fixture
def owned_by_a_plain_role(server_dsn: str) -> Iterator[tuple[str, str]]:
    """(the owner's DSN, a superuser's DSN) of a database owned and migrated by a role that
    is not a superuser."""
    role, name = f"props_owner_{SESSION}", f"props_test_{SESSION}_{uuid.uuid4().hex[:10]}"
    with _admin(server_dsn) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(TEST_ROLE_PASSWORD)))
    superuser = create_database(server_dsn, name)
    with _admin(superuser) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
            sql.Identifier(name), sql.Identifier(role)))
        conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(sql.Identifier(role)))
    owner = database.with_user(superuser, role, TEST_ROLE_PASSWORD)
    try:
        yield owner, superuser
    finally:
        drop_database(server_dsn, name)
        with _admin(server_dsn) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _props(*args: str, dsn: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PROPS_DSN": dsn}, check=False)


def _granted(dsn: str) -> bool:
    with _admin(dsn) as conn:
        row = conn.execute(GUARDED).fetchone()
    assert row is not None
    return bool(row[0])


def test_harden_takes_what_a_plain_owners_migration_could_not(
        owned_by_a_plain_role: tuple[str, str]) -> None:
    owner, superuser = owned_by_a_plain_role
    anyio.run(migrate.migrate_database, owner)
    assert _granted(superuser)  # the migration could not revoke it (negative control)
    status = _props("db", "status", dsn=owner)
    assert "everyone may still call lo_create(oid): run `props db harden`" in \
        " ".join(status.stdout.split())
    again = _props("db", "migrate", dsn=owner)  # migrate as the owner again: nothing changes
    assert again.returncode == 0 and _granted(superuser)

    refused = _props("db", "harden", dsn=owner)
    assert refused.returncode == 77, refused.stdout + refused.stderr
    assert "superuser" in refused.stderr and _granted(superuser)

    done = _props("db", "harden", "--dsn", superuser, dsn=owner)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not _granted(superuser)
    with _admin(superuser) as conn:
        for fn in migrate.GUARDED_FUNCTIONS:
            for grantee in ("public", "props_analyst"):
                row = conn.execute("SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                                   (grantee, fn)).fetchone()
                assert row is not None and not row[0], (grantee, fn)
            row = conn.execute("SELECT has_function_privilege('props_service', %s, "
                               "'EXECUTE')", (fn,)).fetchone()
            assert row is not None and row[0], fn  # the service keeps what it uses
    status = _props("db", "status", dsn=owner)
    assert "may still call" not in status.stdout

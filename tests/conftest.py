"""Real PostgreSQL for every test: PROPS_TEST_DSN if set, else an embedded server.

Each test gets its own database, cloned from a migrated template made once per session, and
dropped afterwards; names carry this session's id so cleanup touches only what it created.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import psycopg
import pytest
from psycopg import sql

from props.core.domain.store import open_store
from props.core.log import database, embedded, migrate
from props.core.log.store import EventStore
from props.projections import engine
from props.reactors.runtimes.docker_runtime import DockerRuntime

SESSION = uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"  # asyncpg runs on asyncio only


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    if dsn := os.environ.get("PROPS_TEST_DSN", "").strip():
        yield dsn
        return
    home = Path(tempfile.mkdtemp(prefix="props-test-pg-"))
    try:
        yield embedded.ensure_running(home)
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _admin(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, autocommit=True)


def create_database(server: str, name: str, template: str | None = None) -> str:
    with _admin(server) as conn:
        if template:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)))
        else:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database.with_database(server, name)


def drop_database(server: str, name: str) -> None:
    with _admin(server) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(name)))


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    name = f"props_test_{SESSION}_template"
    dsn = create_database(server_dsn, name)

    anyio.run(migrate.migrate_database, dsn)
    try:
        yield name
    finally:
        drop_database(server_dsn, name)


@pytest.fixture
def new_database(server_dsn: str) -> Iterator[object]:
    """A factory: `new_database(migrated=True)` -> DSN of a fresh database for this test."""
    made: list[str] = []

    def make(template: str | None = None) -> str:
        name = f"props_test_{SESSION}_{uuid.uuid4().hex[:10]}"
        made.append(name)
        return create_database(server_dsn, name, template)

    yield make
    for name in made:
        drop_database(server_dsn, name)


@pytest.fixture
def dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    """A migrated database of this test's own."""
    name = f"props_test_{SESSION}_{uuid.uuid4().hex[:10]}"
    yield create_database(server_dsn, name, template_db)
    drop_database(server_dsn, name)


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """An empty (unmigrated) database of this test's own."""
    name = f"props_test_{SESSION}_{uuid.uuid4().hex[:10]}"
    yield create_database(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[EventStore]:
    async with open_store(dsn) as s:
        yield s


TEST_ROLE_PASSWORD = "props-test-role-password"


def as_role(dsn: str, role: str) -> str:
    """`dsn`'s database as one of props' roles, given a password here first: the embedded
    test server asks every role for one (scram), as a deployment's does."""
    with _admin(dsn) as conn:
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(TEST_ROLE_PASSWORD)))
    return database.with_user(dsn, role, TEST_ROLE_PASSWORD)


async def fence_clear(store: EventStore, seconds: float = 120) -> None:
    """Wait until every committed event is readable: on a server shared with other work (a
    second suite, other databases), an open transaction anywhere holds the visibility fence
    back, and a rebuild or a read of the log then stops short of what the test appended."""
    import anyio

    with anyio.fail_after(seconds):
        while (await store.fence_status()).held_back:  # noqa: ASYNC110 (a poll of the server)
            await anyio.sleep(0.05)



async def rebuilt(store: EventStore, *args: Any, **kwargs: Any) -> engine.RebuildReport:
    """`engine.rebuild` once every committed event is readable (see `fence_clear`): a
    rebuild folds the log up to the fence, so on a shared server it could otherwise stop
    short of what the test has just appended."""
    await fence_clear(store)
    return await engine.rebuild(store, *args, **kwargs)

@asynccontextmanager
async def fence_held(store: EventStore) -> AsyncIterator[None]:
    """A transaction with an id, open for the block: every later commit waits behind it."""
    conn = await asyncpg.connect(store.dsn)
    try:
        async with conn.transaction():
            await conn.fetchval("SELECT txid_current()")
            yield
    finally:
        await conn.close()


@pytest.fixture
def new_event() -> object:
    """A factory of small valid events: `new_event(phase="x")`."""
    from props.core.domain import catalog

    def make(phase: str = "review", run: uuid.UUID | None = None) -> catalog.PhaseCompleted:
        return catalog.PhaseCompleted(run_id=run or uuid.UUID(int=1), phase=phase,
                                      duration_seconds=0.5)

    return make


# -- container runtimes --------------------------------------------------------------------------

# The slowest checks that do not depend on the server's kind run once per CI: on the
# embedded server (the README's command), not again on a PostgreSQL named by PROPS_TEST_DSN.
# What they check is an engine's or a browser's behaviour, a model server's faults, widths
# at a terminal, the API's contract or a benchmark's ratios: the SQL they run is the same
# SQL the rest of the suite runs on both servers.
once_per_ci = pytest.mark.skipif(
    bool(os.environ.get("PROPS_TEST_DSN")),
    reason="NORUN here: runs on the embedded server only (what it checks does not depend "
           "on the server's kind: tests/conftest.py, once_per_ci); unset PROPS_TEST_DSN to "
           "run it")


def docker_required() -> bool:
    """In CI (PROPS_REQUIRE_DOCKER=1) a missing engine fails the Docker tests; on a
    developer's machine they are skipped, visibly."""
    return os.environ.get("PROPS_REQUIRE_DOCKER") == "1"


REFERENCE_IMAGE = "props-reference-critic:test"  # the reference rootfs, for the tests


@asynccontextmanager
async def docker_or_skip() -> AsyncIterator[DockerRuntime]:
    """A DockerRuntime on the engine at DOCKER_HOST (or the local socket), with the reference
    image imported (a rootfs made here, `docker import`ed, never pulled)."""
    from props.core.domain import definitions
    from props.reactors.runtimes import docker_runtime

    if not await docker_runtime.reachable():
        message = "no Docker engine reachable (start dockerd or set DOCKER_HOST)"
        if docker_required():
            pytest.fail(f"{message}; PROPS_REQUIRE_DOCKER=1 demands one")
        pytest.skip(message)
    async with docker_runtime.DockerRuntime.connect() as rt:
        await rt.import_image(definitions.reference_rootfs(), REFERENCE_IMAGE)
        yield rt


@pytest.fixture
async def docker() -> AsyncIterator[DockerRuntime]:
    async with docker_or_skip() as rt:
        yield rt


PODMAN_URL = os.environ.get("PROPS_PODMAN_URL", "unix:///run/podman/podman.sock")


@asynccontextmanager
async def podman_or_skip() -> AsyncIterator[DockerRuntime]:
    """A DockerRuntime on Podman's Docker-compatible API service (`podman system service`)
    at PROPS_PODMAN_URL, with the reference image imported; in CI (PROPS_REQUIRE_PODMAN=1)
    a missing service fails the test, elsewhere it is skipped, visibly."""
    from props.core.domain import definitions
    from props.reactors.runtimes import docker_runtime

    if not await docker_runtime.reachable(PODMAN_URL):
        message = f"no Podman API service at {PODMAN_URL} (podman system service)"
        if os.environ.get("PROPS_REQUIRE_PODMAN") == "1":
            pytest.fail(f"{message}; PROPS_REQUIRE_PODMAN=1 demands one")
        pytest.skip(message)
    async with docker_runtime.DockerRuntime.connect(PODMAN_URL) as rt:
        await rt.import_image(definitions.reference_rootfs(), REFERENCE_IMAGE)
        yield rt


@pytest.fixture
async def served(store: EventStore, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[EventStore]:
    """The samples synced; the launcher, the grader and the projection runner serving on
    local processes, with a PROPS_HOME of this test's own."""
    from props.reactors.runtimes.local_runtime import LocalRuntime
    from tests.reactor_helpers import serving, sync_samples

    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    async with serving(store, [LocalRuntime(tmp_path / "containers", trust_commands=True)]):
        yield store

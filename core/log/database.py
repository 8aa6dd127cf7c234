"""Which PostgreSQL to use, and connections to it with driver errors wrapped.

`PROPS_DSN` set: that server. Unset: the embedded server under `PROPS_HOME`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeAlias

import anyio
import asyncpg
import asyncpg.pool

from props.core.log import embedded, errors

# The DSN's parts, named here too: callers read them as database.with_user (and the like).
from props.core.log.dsn import redact as redact
from props.core.log.dsn import url_parts as url_parts
from props.core.log.dsn import with_database as with_database
from props.core.log.dsn import with_user as with_user

log = logging.getLogger(__name__)

APPLICATION_NAME = "props"
POOL_CLOSE_WAIT = 10.0  # seconds a pool's connections have to be given back at its close

# A connection of its own or one borrowed from a pool: both run statements alike.
Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)

# Errors that mean "the server is not there (now)", as opposed to "the request was wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    # A pooled connection that the server cut while it sat idle can be handed out before
    # asyncpg notices; its first statement then fails with "another operation is in
    # progress". The connection is gone, not the request wrong: retry on another.
    asyncpg.InternalClientError,
)
# ... and what a long-running reader retries on, with backoff, rather than dying.
UNAVAILABLE: tuple[type[BaseException], ...] = (errors.StoreUnavailable, *CONNECTION_ERRORS)


def only(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether `exc` is of `kinds`, or is a group (from a task group) of only such errors."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only(e, kinds) for e in exc.exceptions)
    return isinstance(exc, kinds)


SERVICE_ROLE = "props_service"
ANALYST_ROLE = "props_analyst"


def resolve_dsn() -> str:
    """The owner's DSN (migrations, archival, restores): `PROPS_DSN`, else the embedded
    server's owner (the server started if needed)."""
    if dsn := os.environ.get("PROPS_DSN", "").strip():
        return dsn
    return embedded.ensure_running(embedded.default_home())


def resolve_service_dsn() -> str:
    """The DSN the service (reactors, the API, the CLI's reads and writes) runs as:
    `PROPS_SERVICE_DSN`; else `PROPS_DSN` as it is (that server's roles are its operator's:
    `props db status` says when the service would run as the owner); else the embedded
    server's `props_service`, which owns nothing."""
    if dsn := os.environ.get("PROPS_SERVICE_DSN", "").strip():
        return dsn
    if dsn := os.environ.get("PROPS_DSN", "").strip():
        return dsn
    return embedded.role_dsn(embedded.default_home(), SERVICE_ROLE)


def resolve_analyst_dsn() -> str:
    """The read-only analyst's DSN: `PROPS_DSN`'s server as `props_analyst` (no password:
    that server's rules), else the embedded server's, with its password."""
    if dsn := os.environ.get("PROPS_DSN", "").strip():
        return with_user(dsn, ANALYST_ROLE)
    return embedded.role_dsn(embedded.default_home(), ANALYST_ROLE)


@contextmanager
def unavailable_as_props_error(dsn: str) -> Iterator[None]:
    """Turn "cannot reach the server" driver errors into `StoreUnavailable`."""
    try:
        yield
    except asyncpg.InvalidCatalogNameError as exc:
        raise errors.StoreUnavailable(
            f"the database in {redact(dsn)} does not exist: {exc}. Create it, or fix PROPS_DSN."
        ) from exc
    except asyncpg.InvalidAuthorizationSpecificationError as exc:  # and a wrong password
        raise errors.ConfigurationError(
            f"PostgreSQL at {redact(dsn)} refused the login: {exc}. Fix the role or password "
            "in PROPS_DSN (`props db dsn` prints the owner's)."
        ) from exc
    except ValueError as exc:  # not a DSN asyncpg reads (ClientConfigurationError is one)
        raise errors.ConfigurationError(
            f"PROPS_DSN is not a PostgreSQL connection string asyncpg can use ({exc}): "
            "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
        ) from exc
    except CONNECTION_ERRORS as exc:
        raise errors.StoreUnavailable(
            f"cannot reach PostgreSQL at {redact(dsn)}: {exc}. Is the server running? "
            "Set PROPS_DSN to a reachable server, or unset it to use the embedded one."
        ) from exc


async def connect(dsn: str, **kwargs: Any) -> asyncpg.Connection:
    """One connection (for LISTEN, advisory locks, migrations), errors wrapped."""
    with unavailable_as_props_error(dsn):
        conn: asyncpg.Connection = await asyncpg.connect(
            dsn, server_settings={"application_name": APPLICATION_NAME}, **kwargs
        )
    return conn


@asynccontextmanager
async def session(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A dedicated connection for the block, closed afterwards."""
    conn = await connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool connections never carry session state (LISTEN, advisory locks and SET happen on
    dedicated connections), so releasing one needs no reset query: a round trip saved on
    every pooled statement. An open transaction is still rolled back by asyncpg."""


@asynccontextmanager
async def pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> AsyncIterator[asyncpg.Pool]:
    """A connection pool for statements and transactions, never for session state."""
    with unavailable_as_props_error(dsn):
        p: asyncpg.Pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            reset=_keep_session,
            server_settings={"application_name": APPLICATION_NAME},
        )
    try:
        yield p
    finally:
        # Bounded: a server that stopped answering held a stopping command for good.
        closed = False
        try:
            with anyio.move_on_after(POOL_CLOSE_WAIT):
                await p.close()
                closed = True
        finally:
            if not closed:  # (timed out, or cancelled: its connections are dropped at once)
                p.terminate()


async def watch_session(conn: asyncpg.Connection, every: float = 1.0) -> None:
    """Return never; raise `StoreUnavailable` once `conn`'s session is gone. Run it beside
    work done under the session's advisory locks: a lost session has released them, and
    another instance may hold them already, so the work must stop."""
    while True:
        await anyio.sleep(every)
        try:
            with anyio.fail_after(max(15.0, every * 10)):  # slow under load is not dead
                await conn.fetchval("SELECT 1")
        except Exception as exc:
            if not isinstance(exc, (*UNAVAILABLE, TimeoutError)):
                raise
            raise errors.StoreUnavailable(
                f"lost the session holding an advisory lock ({exc}); stopping the work it "
                f"guarded until the lock is taken again") from exc


# For a transaction of statements over many rows at once (a projection's fold, grading on
# the server), prepared once and run again and again with other arguments:
# - each run planned for its own arguments: after five runs PostgreSQL may switch to one
#   generic plan, and for grading it chose one that read whole tables (11 s a chunk
#   instead of 0.15, measured on a log of a million issues);
# - no JIT compiling: these statements are priced high and run in milliseconds (a chunk's
#   check took 170 ms compiled, 8 ms not, PostgreSQL 15).
BULK = {"plan_cache_mode": "force_custom_plan", "jit": "off"}
BULK_SETTINGS = "; ".join(f"SET LOCAL {name} = {value}" for name, value in BULK.items())

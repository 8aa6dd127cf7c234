"""Apply the ordered SQL files in `schema/migrations/` and report where a database stands.

Each file runs once, in its own transaction, under a session advisory lock so two migrators
never interleave. Its sha256 is recorded; a file changed after it was applied is refused,
never re-run. A database that has migrations this code does not know (a newer props) is
refused too. Numbers may skip (branches take numbers and some never land), but a file numbered
below the highest applied one that was not applied itself (a late lower number) is refused:
applying it would run it after migrations written to come after it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from datetime import datetime
from importlib import resources
from typing import Literal

import asyncpg

from props.core.log import database, errors, leadership
from props.schema import queries

_HARDENING = queries.load("hardening")
_Q = queries.load("migrations")
_LOCKS = queries.load("leadership")
# What `props db status` checks, and `props db harden` takes from PUBLIC (with the rest of
# their families: every lo_* and advisory-lock function).
GUARDED_FUNCTIONS = ("lo_create(oid)", "pg_advisory_lock(bigint)", "pg_notify(text,text)",
                     "pg_current_xact_id()", "txid_current()")

_FILE_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class MigrationState:
    version: int
    name: str
    state: Literal["applied", "pending", "changed", "unknown", "late"]
    applied_at: datetime | None


def available() -> list[Migration]:
    """The migrations shipped with this props, in order."""
    folder = resources.files("props.schema").joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            raise errors.SchemaError(
                f"migration file {entry.name!r} is not named NNNN_lowercase_words.sql"
            )
        found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        twice = sorted({v for v in versions if versions.count(v) > 1})
        raise errors.SchemaError(f"two migration files share the number(s) {twice}: "
                                 f"renumber one of each pair")
    return found


def gaps(states: list[MigrationState]) -> list[int]:
    """Numbers below the highest known that no file or applied migration has: allowed (a
    number taken by work that never landed), and said by `props db status`."""
    have = {s.version for s in states}
    return [v for v in range(1, max(have, default=0)) if v not in have]


async def _applied(conn: database.Connection) -> dict[int, asyncpg.Record]:
    exists = await conn.fetchval(_Q["recorded"])
    if not exists:
        return {}
    rows = await conn.fetch(_Q["applied"])
    return {row["version"]: row for row in rows}


async def status(conn: database.Connection) -> list[MigrationState]:
    """Every known and every applied migration with its state, in order."""
    applied = await _applied(conn)
    highest = max(applied, default=0)
    states: list[MigrationState] = []
    shipped = {m.version: m for m in available()}
    for version in sorted(set(shipped) | set(applied)):
        row = applied.get(version)
        mig = shipped.get(version)
        if mig is None:
            assert row is not None  # the version came from one of the two
            states.append(MigrationState(version, row["name"], "unknown", row["applied_at"]))
        elif row is None:
            states.append(MigrationState(version, mig.name,
                                         "late" if version < highest else "pending", None))
        elif row["sha256"] != mig.sha256:
            states.append(MigrationState(version, mig.name, "changed", row["applied_at"]))
        else:
            states.append(MigrationState(version, mig.name, "applied", row["applied_at"]))
    return states


def _refuse_drift(states: list[MigrationState]) -> None:
    highest = max((s.version for s in states if s.applied_at is not None), default=0)
    for s in states:
        if s.state == "late":
            raise errors.SchemaError(
                f"migration {s.name} is numbered below {highest:04d}, already applied here, "
                f"and was not applied itself: renumber it above {highest:04d} (a late lower "
                f"number would run after the migrations written to follow it)")
        if s.state == "changed":
            raise errors.SchemaError(
                f"migration {s.name} was changed after it was applied to this database "
                f"(its sha256 no longer matches). Applied migrations are never re-run: restore "
                f"the file as it was, and put the change in a new migration file."
            )
        if s.state == "unknown":
            raise errors.SchemaError(
                f"this database has migration {s.version} ({s.name}) that this props does not "
                f"know: it was migrated by a newer props. Upgrade props to use it."
            )


async def migrate(conn: database.Connection) -> list[Migration]:
    """Apply every pending migration; return those applied. Safe to run concurrently."""
    await conn.execute(_LOCKS["lock"], leadership.MIGRATION)
    try:
        await conn.execute(_Q["bootstrap"])
        states = await status(conn)
        _refuse_drift(states)
        pending = {s.version for s in states if s.state == "pending"}
        done: list[Migration] = []
        for mig in available():
            if mig.version not in pending:
                continue
            async with conn.transaction():
                await conn.execute(mig.sql)
                await conn.execute(_Q["record"], mig.version, mig.name, mig.sha256)
            done.append(mig)
        if await conn.fetchval(_HARDENING["is_superuser"]):
            # Every run, not only one that applied something: a server first migrated by
            # another owner is hardened by the first superuser who migrates it.
            await conn.execute(_HARDENING["harden"])
        return done
    finally:
        await conn.execute(_LOCKS["unlock"], leadership.MIGRATION)


async def harden(conn: database.Connection) -> list[str]:
    """Take from agents and analysts what only a superuser can (schema/sql/hardening.sql),
    on a schema that is current; returns the guarded functions still granted (none)."""
    await require_current(conn)
    if not await conn.fetchval(_HARDENING["is_superuser"]):
        raise errors.PrivilegeRequired(
            "`props db harden` revokes privileges on PostgreSQL's built-in functions, which "
            "only a superuser may change: run it with PROPS_DSN (or --dsn) naming a "
            "superuser's connection, once per database")
    await conn.execute(_HARDENING["harden"])
    rows = await conn.fetch(_HARDENING["still_granted"], list(GUARDED_FUNCTIONS))
    return [r[0] for r in rows]


async def migrate_database(dsn: str) -> list[Migration]:
    """`migrate` on a connection of its own."""
    async with database.session(dsn) as conn:
        return await migrate(conn)


async def migrate_if_new(dsn: str) -> list[Migration]:
    """Migrate a database that no props has migrated yet (nothing applied: an empty
    PROPS_HOME's, a new server database), as `migrate` would; leave any other as it is
    (`require_current` then says what to run). Return the migrations applied."""
    async with database.session(dsn) as conn:
        if any(s.applied_at is not None for s in await status(conn)):
            return []
        return await migrate(conn)


async def require_current(conn: database.Connection) -> None:
    """Raise a `SchemaError` that says what to run unless the schema is fully migrated."""
    states = await status(conn)
    _refuse_drift(states)
    pending = [s.name for s in states if s.state == "pending"]
    if pending:
        raise errors.SchemaError(
            f"the database schema is not up to date ({len(pending)} pending migration(s), "
            f"first {pending[0]}): run `props db migrate`."
        )

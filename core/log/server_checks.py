"""What about the server would let agents past their role: read from the server itself.

props cannot change the rules of a server it was given (`PROPS_DSN`), so it says what it
finds: `trust` rules in pg_hba.conf (an agent handed the server's socket, or on its network,
logs in as any role with no password), built-in functions agents may still call (a migration
run by a role that is not a superuser cannot revoke them: `props db harden` does), a database
that still grants TEMP to everyone, and a service that runs as a superuser or as the schema's
owner.
"""

from __future__ import annotations

import asyncpg

from props.core.log import database, migrate
from props.schema import queries

_Q = queries.load("hardening")


async def trust_rules(conn: database.Connection) -> list[str] | None:
    """The pg_hba.conf rules that let a connection in without a password (None: this role
    may not read the rules)."""
    try:
        rows = await conn.fetch(_Q["trust_rules"])
    except asyncpg.InsufficientPrivilegeError:
        return None
    return [f"pg_hba.conf line {r['line_number']}: {r['type']} "
            f"{','.join(r['database'] or [])} {','.join(r['user_name'] or [])} "
            f"{r['address'] or ''}".rstrip() + " trusts without a password"
            for r in rows]


async def warnings(conn: database.Connection) -> list[str]:
    """One line for each way the agents' isolation is weaker on this server than props
    makes it on its embedded server."""
    out: list[str] = []
    rules = await trust_rules(conn)
    if rules is None:
        out.append("cannot read pg_hba.conf's rules as this role: check by hand that no "
                   "rule says `trust` for the socket or the network agents use")
    else:
        out += [f"{rule}: an agent could log in there as any role, the owner included"
                for rule in rules]
    for fn in migrate.GUARDED_FUNCTIONS:
        if await conn.fetchval(_Q["public_may_execute"], fn):
            out.append(f"everyone may still call {fn}: run `props db harden` as a "
                       f"superuser once to revoke it from agents and analysts")
    if await conn.fetchval(_Q["temp_granted"]):
        out.append("this database grants TEMP to everyone or to the analyst (revoked at the "
                   "first launch, or by `props db harden`)")
    return out


async def service_warnings(conn: database.Connection) -> list[str]:
    """What is wrong with the role the service runs as (the connection's)."""
    row = await conn.fetchrow(_Q["service_role"])
    if row is None:
        return []
    if row["rolsuper"]:
        return [f"the service runs as {row['rolname']}, a superuser: set PROPS_SERVICE_DSN "
                f"to a connection as {database.SERVICE_ROLE}, which owns nothing"]
    if row["owner"]:
        return [f"the service runs as {row['rolname']}, the schema's owner (it could disable "
                f"the log's triggers): set PROPS_SERVICE_DSN to {database.SERVICE_ROLE}"]
    return []

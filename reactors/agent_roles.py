"""The PostgreSQL side of a run's agent: its own role, its binding, and what it reported.

A role `props_run_<run id hex>` is created at launch (a member of `props_agent`, which may
only call the functions of schema `agent`; see migration 0003) and bound to the run with the
definition's caps. What the agent reports waits in `props.agent_outbox` until the launcher
drains it: each row is checked against the event catalog and appended to the run's stream
under the id the agent gave it, so a drain repeated after a crash appends nothing twice.
After the container exits the binding is closed, the role's sessions ended and the role
dropped; roles whose binding is closed are reaped at start-up if a crash left them behind.
"""

from __future__ import annotations

import dataclasses
import secrets
import uuid
from datetime import datetime
from typing import Any

import orjson

from props.core import catalog, database, errors
from props.core.events import NewEvent
from props.core.store import EventStore
from props.reactors import grader_runs
from props.reactors.grader_runs import GradingTask
from props.schema import queries

_Q = queries.load("agents")
ROLE_PREFIX = "props_run_"


def role_name(run_id: uuid.UUID) -> str:
    return f"{ROLE_PREFIX}{run_id.hex}"


def agent_dsn(dsn: str, role: str, password: str,
              socket: tuple[str, str] | None = None) -> str:
    """The service's DSN as the agent role; through the Unix socket `(directory, port)` when
    given (an agent without network reaches the server through its socket, mounted into the
    container)."""
    scheme, authority, name, query = database.url_parts(dsn)
    host = authority.rpartition("@")[2]
    params = [p for p in query.split("&")
              if p and not p.startswith(("host=", "port=", "user=", "password="))]
    if socket is None:
        params += [p for p in query.split("&") if p.startswith(("host=", "port="))]
    else:
        host = ""
        params += [f"host={socket[0]}", f"port={socket[1]}"]
    return f"{scheme}://{role}:{password}@{host}/{name}" + \
        (f"?{'&'.join(params)}" if params else "")


async def create(store: EventStore, run_id: uuid.UUID, limits: catalog.AgentLimits,
                 agent_type: catalog.AgentType = "critic") -> str:
    """Create (or re-key, after a restart) the run's role and binding; return its password."""
    role = role_name(run_id)
    password = secrets.token_hex(16)  # hex: safe inside the quoted literal below
    async with store.pool.acquire() as conn, conn.transaction():
        exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role)
        verb = "ALTER" if exists else "CREATE"
        member = "" if exists else " IN ROLE props_agent"
        await conn.execute(f"{verb} ROLE {role} LOGIN PASSWORD '{password}' "
                           f"CONNECTION LIMIT 4{member}")
        await conn.execute(_Q["bind"], role, run_id, agent_type, limits.max_events,
                           limits.max_bytes)
    return password


async def drop(store: EventStore, run_id: uuid.UUID) -> None:
    """Close the binding (nothing more is accepted), end the role's sessions, drop it."""
    role = role_name(run_id)
    await store.pool.execute(_Q["close"], role)
    await store.pool.execute(_Q["terminate"], role)
    await store.pool.execute(f"DROP ROLE IF EXISTS {role}")


async def reap(store: EventStore) -> int:
    """Drop the roles of ended runs that a crash or a lost connection left behind (the
    binding closed first, so nothing more is accepted from them)."""
    roles = [r[0] for r in await store.pool.fetch(_Q["leftover_roles"], ROLE_PREFIX + "%")]
    for role in roles:
        await store.pool.execute(_Q["close"], role)
        await store.pool.execute(_Q["terminate"], role)
        await store.pool.execute(f"DROP ROLE IF EXISTS {role}")
    return len(roles)


@dataclasses.dataclass(frozen=True)
class Binding:
    events: int
    bytes: int
    over_cap: bool


async def binding(store: EventStore, run_id: uuid.UUID) -> Binding | None:
    row = await store.pool.fetchrow(_Q["binding"], role_name(run_id))
    return None if row is None else Binding(row["events"], row["bytes"], row["over_cap"])


@dataclasses.dataclass
class Drained:
    appended: int = 0
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    malformed: str | None = None  # the first report that failed the catalog's checks
    last_seq: int = 0  # the outbox is read from here on


async def drain(store: EventStore, run_id: uuid.UUID, stored: set[uuid.UUID],
                totals: Drained, grading: GradingTask | None = None) -> Drained:
    """Append what the agent reported since the last drain to its run's stream, and a
    grader's grades to the grading streams of the runs they grade.

    `stored` holds the event ids already in the run's stream and grows with each append. A
    report that fails validation (or a grade the grader was not asked for) is not appended:
    `totals.malformed` names it, and the launcher ends the run as failed."""
    rows = await store.pool.fetch(_Q["outbox"], run_id, totals.last_seq)
    todo: list[NewEvent] = []
    grades: dict[str, list[NewEvent]] = {}
    for row in rows:
        if row["event_id"] in stored:
            totals.last_seq = row["seq"]
            continue
        try:
            event = catalog.REGISTRY.parse(row["type"], orjson.loads(row["data"]))
            if isinstance(event, catalog.GradeEmitted):
                if grading is None:
                    raise errors.InvalidEvent("only grader runs report grades")
                grading.check(event)
        except errors.InvalidEvent as exc:
            totals.malformed = totals.malformed or f"report #{row['seq']}: {exc}"[:500]
            break
        totals.last_seq = row["seq"]
        meta = _metadata(row["reported_at"])
        if isinstance(event, catalog.GradeEmitted):
            stream, grade_id = grader_runs.route(event)
            grades.setdefault(stream, []).append(NewEvent(event, grade_id,
                                                          {**meta, "grader_run": str(run_id)}))
            continue
        todo.append(NewEvent(event, row["event_id"], meta))
        if isinstance(event, catalog.LlmResponded):
            totals.cost_usd += event.cost_usd
            totals.tokens_in += event.tokens_in
            totals.tokens_out += event.tokens_out
    if todo:
        await store.append(f"run-{run_id}", todo)
        stored.update(e.event_id for e in todo)
        totals.appended += len(todo)
    for stream, batch in grades.items():
        # A grade may be stored already (an earlier drain, another grader): keep the rest.
        known = {r[0] for r in await store.pool.fetch(
            _Q["stored_ids"], [e.event_id for e in batch])}
        fresh = [e for e in batch if e.event_id not in known]
        if fresh:
            await store.append(stream, fresh)
            totals.appended += len(fresh)
    return totals


def _metadata(reported_at: datetime) -> dict[str, Any]:
    return {"actor": "agent", "reported_at": reported_at.isoformat()}

"""The PostgreSQL side of a run's agent: its own role, its binding, and what it reported.

A login role is opened at launch by the owner's function `props.open_agent_role` (migration
0007, 0012): a member of `props_agent`, which may only call the functions of schema `agent`, under
a random name (`props_agent_<hex>`: role names are visible to every session, so a name must
not reveal the run), with short timeouts, one connection, a cap on temp files, and no temp
tables, large objects or advisory locks. It is bound to the run with the definition's caps.
What the agent reports waits in `props.agent_outbox` until the launcher drains it: each row
is checked against the event catalog and appended to the run's stream under an id derived
from (run, the id the agent gave), so no agent can name another run's or the launcher's
events, and a drain repeated after a crash appends nothing twice. After the container exits
the binding is closed, the role's sessions ended and the role dropped; roles of ended runs
that a crash left behind are reaped at start-up and on every sweep, and a role that cannot
be dropped is retried there. The role's password is drawn once and kept in the binding
(readable by the service, never by agents): a restarted launcher that adopts a running
container must not lock its agent out.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import uuid
from datetime import datetime
from typing import Any

import orjson

from props.core.domain import caps, catalog, streams
from props.core.log import database, errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.reactors.launcher import grader_runs
from props.reactors.launcher.grader_runs import GradingTask
from props.schema import queries

log = logging.getLogger(__name__)

_Q = queries.load("agents")
ROLE_PREFIX = "props_agent_"
# The namespace of the log ids of what agents report: uuid5(namespace, "<run>:<agent's id>").
_REPORT_NAMESPACE = uuid.UUID("5d1f0e7a-2b9c-4c61-9a0e-7c4b8e2f3a15")
# How long an agent's statement (or idle transaction) and transaction may last: its role's
# timeouts, and the launcher's watchdog ends the session past them (an agent can SET the
# timeouts away; a transaction held open stalls every reader's fence).
STATEMENT_LIMIT_SECONDS = 5.0
TRANSACTION_LIMIT_SECONDS = 10.0
# Sessions one run's role may open at once (its CONNECTION LIMIT, migration 0012): the SDK
# holds one connection, and each session is a server process whose memory the agent can grow
# (docs/internals/roles.md).
AGENT_CONNECTIONS = 1
# The share of the server's notification queue past which agent and analyst sessions are
# ended: a listener that stops reading holds the queue, and once it is full every append
# (which notifies) fails.
NOTIFY_QUEUE_SHARE = 0.25
# An analyst's transaction that took a transaction id holds every reader's fence: ended past
# this (an analyst who needs longer works on a copy, e.g. pg_dump of projections).
ANALYST_FENCE_SECONDS = 30.0


def report_id(run_id: uuid.UUID, agent_event_id: uuid.UUID) -> uuid.UUID:
    """The log's id of an event an agent reported under `agent_event_id`: the agent's ids
    are its own namespace, so it can never collide with another run's or the launcher's."""
    return uuid.uuid5(_REPORT_NAMESPACE, f"{run_id}:{agent_event_id}")


@dataclasses.dataclass(frozen=True)
class Credentials:
    role: str
    password: str = dataclasses.field(repr=False)


_OPEN_ROLE = queries.typed("agents", "open_role", Credentials)


def agent_dsn(dsn: str, role: str, password: str,
              socket: tuple[str, str] | None = None,
              tcp: tuple[str, int, str] | None = None) -> str:
    """The service's DSN as the agent role; through the Unix socket `(directory, port)` when
    given (an agent without network reaches the server through its socket, mounted into the
    container), or over TCP to `(host, port, sslmode)` (an agent on another host)."""
    scheme, authority, name, query = database.url_parts(dsn)
    host = authority.rpartition("@")[2]
    params = [p for p in query.split("&")
              if p and not p.startswith(("host=", "port=", "user=", "password="))]
    if tcp is not None:
        address, port, sslmode = tcp
        host = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        params = [p for p in params if not p.startswith("sslmode=")] + [f"sslmode={sslmode}"]
    elif socket is None:
        params += [p for p in query.split("&") if p.startswith(("host=", "port="))]
    else:
        host = ""
        params += [f"host={socket[0]}", f"port={socket[1]}"]
    return f"{scheme}://{role}:{password}@{host}/{name}" + \
        (f"?{'&'.join(params)}" if params else "")


async def create(store: EventStore, run_id: uuid.UUID, limits: caps.Caps,
                 agent_type: catalog.AgentType = "critic") -> Credentials:
    """Open the run's role and binding with its caps (`limits`): made on the first launch; a
    relaunch (a restarted launcher adopting the container) gets the same role and password,
    which the running agent still logs in with, and the binding's caps as they were."""
    credentials = await store.sql.row(
        _OPEN_ROLE, run_id, ROLE_PREFIX + secrets.token_hex(12), secrets.token_hex(16),
        agent_type, limits.max_events, limits.max_bytes, STATEMENT_LIMIT_SECONDS,
        TRANSACTION_LIMIT_SECONDS)
    assert credentials is not None  # the function returns one row
    return credentials


async def role_of(store: EventStore, run_id: uuid.UUID) -> str | None:
    """The name of the run's role (None before its launch)."""
    name = await store.sql.fetchval(_Q["role_of"], run_id)
    return None if name is None else str(name)


async def drop(store: EventStore, run_id: uuid.UUID) -> bool:
    """Close the binding (nothing more is accepted), end the role's sessions, drop it.
    Whether the role is gone (False: it could not be dropped now; the sweep retries)."""
    dropped = await store.sql.fetchval(_Q["close_role"], run_id)
    if dropped is False:
        log.warning("the agent role of run %s could not be dropped; the launcher's sweep "
                    "tries again", run_id)
    return dropped is not False


async def reap(store: EventStore) -> int:
    """Drop the roles of ended runs that a crash or a lost connection left behind (the
    binding closed first, so nothing more is accepted from them). Returns how many went."""
    runs = [r[0] for r in await store.sql.fetch(_Q["leftover_roles"])]
    return sum([await drop(store, run_id) for run_id in runs])


async def end_overruns(store: EventStore) -> int:
    """End agent sessions whose statement or transaction runs past its limit, analyst
    sessions whose transaction has held the visibility fence past ANALYST_FENCE_SECONDS, and
    both once the notification queue is filled past NOTIFY_QUEUE_SHARE."""
    ended: int = await store.sql.fetchval(_Q["end_overruns"], STATEMENT_LIMIT_SECONDS,
                                           TRANSACTION_LIMIT_SECONDS, ANALYST_FENCE_SECONDS,
                                           NOTIFY_QUEUE_SHARE)
    return ended


@dataclasses.dataclass(frozen=True)
class ConnectionRoom:
    room: int  # max_connections less the superusers' reserve
    in_use: int


_ROOM = queries.typed("agents", "connection_room", ConnectionRoom)


async def connections_short(store: EventStore, capacity: int) -> str | None:
    """What to say when `capacity` runs' agents at their worst (AGENT_CONNECTIONS sessions
    each) and the connections in use now could use up the server: then the next run, or the
    service itself, would be refused a connection mid-way. None when they fit."""
    room = await store.sql.row(_ROOM)
    assert room is not None
    worst = capacity * AGENT_CONNECTIONS + room.in_use
    if worst <= room.room:
        return None
    return (f"{capacity} slot(s) x {AGENT_CONNECTIONS} agent connections + {room.in_use} "
            f"connections in use now = {worst}, more than the server's {room.room} "
            f"(max_connections less those reserved): lower the launcher's capacity or raise "
            f"max_connections")


@dataclasses.dataclass(frozen=True)
class Binding:
    events: int
    bytes: int
    over_cap: bool
    max_events: int
    max_bytes: int
    cap_reached: str | None  # the cap a refused charge would have passed (migration 0015)


_BINDING = queries.typed("agents", "binding", Binding)


async def binding(store: EventStore, run_id: uuid.UUID) -> Binding | None:
    return await store.sql.row(_BINDING, run_id)


@dataclasses.dataclass(frozen=True)
class _Report:
    """A row of the agent's outbox: what it reported, not yet checked."""

    seq: int
    event_id: uuid.UUID
    type: str
    data: str
    reported_at: datetime


_OUTBOX = queries.typed("agents", "outbox", _Report)


@dataclasses.dataclass
class Drained:
    appended: int = 0
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    malformed: str | None = None  # the first report that failed the catalog's checks
    last_seq: int = 0  # the outbox is read from here on
    # The last model call that gave no usable answer, if the agent recorded one.
    call_failed: catalog.LlmResponded | None = None

    def add_usage(self, e: catalog.LlmResponded) -> None:
        """Count an LLM call's cost and tokens: a run's totals, summed in one place."""
        self.cost_usd += e.cost_usd
        self.tokens_in += e.tokens_in
        self.tokens_out += e.tokens_out
        if e.outcome != "answered":
            self.call_failed = e


async def drain(store: EventStore, run_id: uuid.UUID, stored: set[uuid.UUID],
                totals: Drained, grading: GradingTask | None = None) -> Drained:
    """Append what the agent reported since the last drain to its run's stream, and a
    grader's grades to the grading streams of the runs they grade.

    `stored` holds the event ids already in the run's stream and grows with each append. A
    report that fails validation (or a grade the grader was not asked for) is not appended:
    `totals.malformed` names it, and the launcher ends the run as failed."""
    todo: list[NewEvent] = []
    grades: dict[str, list[NewEvent]] = {}
    for row in await store.sql.rows(_OUTBOX, run_id, totals.last_seq):
        event_id = report_id(run_id, row.event_id)
        if event_id in stored:
            totals.last_seq = row.seq
            continue
        try:
            event = catalog.REGISTRY.parse(row.type, orjson.loads(row.data))
            if isinstance(event, catalog.GradeEmitted):
                if grading is None:
                    raise errors.InvalidEvent("only grader runs report grades")
                grading.check(event)
        except errors.InvalidEvent as exc:
            totals.malformed = totals.malformed or f"report #{row.seq}: {exc}"[:500]
            break
        totals.last_seq = row.seq
        meta = _metadata(row.reported_at)
        if isinstance(event, catalog.GradeEmitted):
            stream, grade_id = grader_runs.route(event)
            grades.setdefault(stream, []).append(NewEvent(event, grade_id,
                                                          {**meta, "grader_run": str(run_id)}))
            continue
        todo.append(NewEvent(event, event_id, meta))
        if isinstance(event, catalog.LlmResponded):
            totals.add_usage(event)
    if todo:
        await store.append(streams.run(run_id), todo)
        stored.update(e.event_id for e in todo)
        totals.appended += len(todo)
    for stream, batch in grades.items():
        # A grade may be stored already (an earlier drain, another grader): keep the rest.
        known = {r[0] for r in await store.sql.fetch(
            _Q["stored_ids"], [e.event_id for e in batch])}
        fresh = [e for e in batch if e.event_id not in known]
        if fresh:
            await store.append(stream, fresh)
            totals.appended += len(fresh)
    return totals


def _metadata(reported_at: datetime) -> dict[str, Any]:
    return {"actor": "agent", "reported_at": reported_at.isoformat()}

"""The agent SDK: how a critic or grader inside a container gets its task and reports back.

The launcher gives every run three environment variables:
- `PROPS_TASK`: the task as JSON (run id, model, example, the definition's config, timeout,
  budget), read with `Agent.from_environment()`;
- `PROPS_EXAMPLE_DIR`: a read-only directory holding exactly the example's files;
- `PROPS_AGENT_DSN`: a PostgreSQL connection as the run's own role, which may do nothing but
  call `agent.report` and `agent.put_blob`: it reads nothing, and writes only to its own run.

Everything an agent does is reported as an event (`prompt`, `llm_call`, `phase`, `issue`).
Each event is checked against the catalog here, before it is sent; the launcher checks it
again before it enters the log. A run has caps on its events and bytes: past them every report
is refused with `CapReached` and the launcher stops the run.

    with Agent.from_environment() as agent:
        for path in agent.files():
            ...
            agent.issue("i1", "why", [Location(file=path, ranges=[LineRange(start=3, end=4)])])
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import psycopg
import pydantic

from props.core.domain import catalog
from props.core.log import retries
from props.core.log.events import Event

AGENT_EVENT_TYPES = ("prompt.composed", "llm.requested", "llm.responded", "phase.completed",
                     "issue.reported", "grade.emitted")  # grades: grader runs only


class Task(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)

    run_id: uuid.UUID
    agent_type: catalog.AgentType
    model: str
    example: catalog.Example
    config: dict[str, Any] = pydantic.Field(default_factory=dict)
    timeout_seconds: float
    budget_usd: float


class CapReached(Exception):
    """The run reached its cap on events or bytes: the launcher stops it."""


# A lost connection (the database restarted, a failover) is reconnected and the call sent
# again, for about seven seconds (retries.AGENT_CALL): both calls are idempotent (a report by
# its event id, a blob by its hash), so a call that reached the server before the connection
# broke is not doubled (it may count once more against the run's caps).


class Agent:
    def __init__(self, task: Task, example_dir: Path, dsn: str) -> None:
        self.task = task
        self.example_dir = example_dir
        self._dsn = dsn
        # One connection (the run's role allows one session), made by the first call: its
        # retries also wait out a previous session of the role still ending on the server.
        self._conn: psycopg.Connection[Any] | None = None
        self._started = time.monotonic()

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self._dsn, autocommit=True, application_name="props-agent")

    def _call(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One function call's single value, across lost connections (AGENT_CALL)."""
        def attempt() -> Any:
            if self._conn is None:
                self._conn = self._connect()
            row = self._conn.execute(sql, params).fetchone()
            return row[0] if row else None

        def lost(_: BaseException, __: int) -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        return retries.AGENT_CALL.retrying_sync(
            lambda exc: isinstance(exc, psycopg.OperationalError), on_retry=lost)(attempt)

    @classmethod
    def from_environment(cls) -> Agent:
        missing = [v for v in ("PROPS_TASK", "PROPS_EXAMPLE_DIR", "PROPS_AGENT_DSN")
                   if not os.environ.get(v)]
        if missing:
            raise SystemExit(f"props agent: {', '.join(missing)} not set: agents are started "
                             f"by the props launcher, which sets them")
        return cls(Task.model_validate_json(os.environ["PROPS_TASK"]),
                   Path(os.environ["PROPS_EXAMPLE_DIR"]), os.environ["PROPS_AGENT_DSN"])

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._conn is not None:
            self._conn.close()

    @property
    def run_id(self) -> uuid.UUID:
        return self.task.run_id

    def files(self) -> Iterator[str]:
        """The example's files, as paths relative to the snapshot root, sorted."""
        for path in sorted(self.example_dir.rglob("*")):
            if path.is_file():
                yield path.relative_to(self.example_dir).as_posix()

    def read(self, path: str) -> str:
        return (self.example_dir / path).read_text(encoding="utf-8", errors="replace")

    # -- reporting --------------------------------------------------------------------------

    def report(self, event: Event) -> None:
        if event.type_name not in AGENT_EVENT_TYPES:
            raise ValueError(f"an agent cannot report {event.type_name} events")
        data = orjson.loads(catalog.REGISTRY.encode(event))
        event_id = uuid.uuid4()  # one id for every attempt: a resent report is not doubled
        accepted = self._call("SELECT agent.report(%s, %s, %s::jsonb)",
                              (event_id, event.type_name, orjson.dumps(data).decode()))
        if not accepted:
            raise CapReached(f"run {self.run_id} reached its cap on events or bytes")

    def put_blob(self, content: bytes) -> str:
        sha = self._call("SELECT agent.put_blob(%s)", (content,))
        if sha is None:
            raise CapReached(f"run {self.run_id} reached its cap on events or bytes")
        return str(sha)

    def prompt(self, text: str, template: str | None = None) -> str:
        """Record the exact prompt bytes; returns their sha256."""
        raw = text.encode()
        sha = self.put_blob(raw)
        self.report(catalog.PromptComposed(run_id=self.run_id, prompt_sha256=sha,
                                           size=len(raw), template=template))
        return sha

    def phase(self, name: str, started: float | None = None) -> None:
        """Record that a phase ended; `started` is its time.monotonic() start."""
        began = self._started if started is None else started
        self.report(catalog.PhaseCompleted(run_id=self.run_id, phase=name,
                                           duration_seconds=time.monotonic() - began))

    def issue(self, issue_id: str, rationale: str, locations: list[catalog.Location],
              severity: catalog.Severity | None = None) -> None:
        self.report(catalog.IssueReported(run_id=self.run_id, issue_id=issue_id,
                                          rationale=rationale, locations=locations,
                                          severity=severity))

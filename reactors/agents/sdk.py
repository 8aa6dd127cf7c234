"""The agent SDK: how a critic or grader inside a container gets its task and reports back.

One file that needs the standard library and, once it connects, psycopg: nothing else of
props. Copy it into a critic's image as it is (docs/howto/write-a-critic.md: the Dockerfile
installs `psycopg[binary]` and this file, nothing more). Importing it loads a few modules of
the standard library; psycopg is imported when an agent connects.

The protocol it speaks, which an agent in any language can speak as well (the how-to says it
in full). The launcher gives every run three environment variables:
- `PROPS_TASK`: the task as JSON (run id, agent type, model, example, the definition's
  config, timeout, budget), read with `Agent.from_environment()`;
- `PROPS_EXAMPLE_DIR`: a read-only directory holding exactly the example's files;
- `PROPS_AGENT_DSN`: a PostgreSQL connection as the run's own role, which may do nothing but
  call `agent.report(event_id uuid, type text, data jsonb)` and `agent.put_blob(bytea)`: it
  reads nothing, and writes only to its own run.
(and a grader `PROPS_GRADING_DIR`, what it grades). Everything an agent does is reported as an
event (`prompt.composed`, `llm.requested`, `llm.responded`, `phase.completed`,
`issue.reported`; a grader `grade.emitted`); the launcher checks each against the catalog
before it enters the log. A run has caps on its events and bytes: past them every report is
refused with `CapReached` and the launcher stops the run.

    with Agent.from_environment() as agent:
        for path in agent.files():
            agent.issue(path, 3, 4, "why it is a defect", "medium")  # numbered i1, i2, ...
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

if TYPE_CHECKING:  # imported when the agent connects, not when this module is
    import psycopg

AGENT_EVENT_TYPES = ("prompt.composed", "llm.requested", "llm.responded", "phase.completed",
                     "issue.reported", "grade.emitted")  # grades: grader runs only
SEVERITIES = ("info", "low", "medium", "high", "critical")
ENVIRONMENT = ("PROPS_TASK", "PROPS_EXAMPLE_DIR", "PROPS_AGENT_DSN")
# The catalog's bounds (props.core.domain.catalog), checked here so an author learns of a
# mistake at the call that made it; the launcher checks them again.
MAX_LINE = 2**31 - 1
MAX_PATH = 1000
MAX_RATIONALE = 20_000
MAX_LOCATIONS = 100
MAX_EVENT_BYTES = 256 * 1024
# A lost connection (the database restarted, a failover) is reconnected and the call sent
# again, 8 attempts over about seven seconds: both calls are idempotent (a report by its
# event id, a blob by its hash), so a call that reached the server before the connection
# broke is not doubled (it may count once more against the run's caps).
CALL_ATTEMPTS = 8
CALL_FIRST_WAIT, CALL_MAX_WAIT = 0.1, 2.0


class Example(NamedTuple):
    """What the agent reviews: a snapshot, whole (files_hash None) or one of its file sets."""

    snapshot: str
    files_hash: str | None = None


class Task(NamedTuple):
    """PROPS_TASK, as the launcher wrote it."""

    run_id: uuid.UUID
    agent_type: str  # critic | grader
    model: str
    example: Example
    config: dict[str, Any]
    timeout_seconds: float
    budget_usd: float

    @classmethod
    def from_json(cls, text: str) -> Task:
        try:
            doc = json.loads(text)
            return cls(uuid.UUID(doc["run_id"]), str(doc["agent_type"]), str(doc["model"]),
                       Example(str(doc["example"]["snapshot"]),
                               doc["example"].get("files_hash")),
                       dict(doc.get("config") or {}), float(doc["timeout_seconds"]),
                       float(doc["budget_usd"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(f"props agent: PROPS_TASK is not a task ({type(exc).__name__}: "
                             f"{exc}): agents are started by the props launcher") from None


class CapReached(Exception):
    """The run reached its cap on events or bytes: the launcher stops it."""


class Reportable(Protocol):
    """An event of props' catalog (a pydantic model): what `Agent.report` also takes."""

    type_name: ClassVar[str]

    def model_dump_json(self) -> str: ...


def location(path: str, start: int, end: int) -> dict[str, Any]:
    """One location of an issue, its bounds checked: a file and one line range."""
    if not isinstance(path, str) or not 0 < len(path) <= MAX_PATH or path.startswith("/"):
        raise ValueError(f"an issue's path is a relative path of 1 to {MAX_PATH} characters, "
                         f"not {str(path)[:80]!r}")
    if type(start) is not int or type(end) is not int or not 1 <= start <= end <= MAX_LINE:
        raise ValueError(f"an issue's lines are 1 <= start <= end <= {MAX_LINE}, "
                         f"not {start!r}..{end!r} in {path}")
    return {"file": path, "ranges": [{"start": start, "end": end}]}


class Agent:
    def __init__(self, task: Task, example_dir: Path, dsn: str) -> None:
        self.task = task
        self.example_dir = example_dir
        self._dsn = dsn
        # One connection (the run's role allows one session), made by the first call: its
        # retries also wait out a previous session of the role still ending on the server.
        self._conn: psycopg.Connection[Any] | None = None
        self._started = time.monotonic()
        self._issues = 0

    @classmethod
    def from_environment(cls) -> Agent:
        missing = [v for v in ENVIRONMENT if not os.environ.get(v)]
        if missing:
            raise SystemExit(f"props agent: {', '.join(missing)} not set: agents are started "
                             f"by the props launcher, which sets them")
        return cls(Task.from_json(os.environ["PROPS_TASK"]),
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

    # -- the two SQL functions ----------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        return psycopg.connect(self._dsn, autocommit=True, application_name="props-agent")

    def _call(self, sql: str, params: tuple[Any, ...]) -> Any:
        """One function call's single value, sent again on a new connection while the
        connection is lost (CALL_ATTEMPTS); any other error is raised at once."""
        import psycopg

        for attempt in range(1, CALL_ATTEMPTS + 1):
            try:
                if self._conn is None:
                    self._conn = self._connect()
                row = self._conn.execute(sql, params).fetchone()
                return row[0] if row else None
            except psycopg.OperationalError:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if attempt == CALL_ATTEMPTS:
                    raise
                time.sleep(min(CALL_MAX_WAIT, CALL_FIRST_WAIT * 2 ** (attempt - 1)))
        raise AssertionError("unreachable")

    def report(self, event: Reportable | str, data: Mapping[str, Any] | None = None) -> None:
        """Report one event: `report(type, data)` (data a JSON object), or a catalog event
        of props (`report(catalog.PhaseCompleted(...))`). Raises CapReached past the caps."""
        if isinstance(event, str):
            type_name, payload = event, dict(data or {})
        else:
            type_name, payload = event.type_name, json.loads(event.model_dump_json())
        if type_name not in AGENT_EVENT_TYPES:
            raise ValueError(f"an agent cannot report {type_name} events")
        text = json.dumps(payload)
        if len(text) > MAX_EVENT_BYTES:
            raise ValueError(f"{type_name} event data is {len(text):,} bytes, over the "
                             f"{MAX_EVENT_BYTES:,}-byte limit: store large content with "
                             f"put_blob() and put its sha256 in the event")
        event_id = uuid.uuid4()  # one id for every attempt: a resent report is not doubled
        if not self._call("SELECT agent.report(%s, %s, %s::jsonb)",
                          (event_id, type_name, text)):
            raise CapReached(f"run {self.run_id} reached its cap on events or bytes")

    def put_blob(self, content: bytes) -> str:
        """Store bytes (a prompt, a message) once; returns their sha256 (hex)."""
        sha = self._call("SELECT agent.put_blob(%s)", (content,))
        if sha is None:
            raise CapReached(f"run {self.run_id} reached its cap on events or bytes")
        return str(sha)

    # -- what agents report ---------------------------------------------------------------

    def prompt(self, text: str, template: str | None = None) -> str:
        """Record the exact prompt bytes; returns their sha256."""
        raw = text.encode()
        sha = self.put_blob(raw)
        self.report("prompt.composed", {"prompt_sha256": sha, "size": len(raw),
                                        "template": template})
        return sha

    def phase(self, name: str, started: float | None = None) -> None:
        """Record that a phase ended; `started` is its time.monotonic() start."""
        began = self._started if started is None else started
        self.report("phase.completed", {"phase": name,
                                        "duration_seconds": time.monotonic() - began})

    def issue(self, path: str, start: int, end: int, rationale: str,
              severity: str | None = None, *,
              also: Iterable[tuple[str, int, int]] = ()) -> str:
        """Report an issue at lines start..end of `path` (relative to the example's root;
        `also`: more (path, start, end) places of the same issue). Issues are numbered in
        the order reported (i1, i2, ...); returns the id given."""
        places = [location(path, start, end), *(location(*p) for p in also)]
        if len(places) > MAX_LOCATIONS:
            raise ValueError(f"an issue has at most {MAX_LOCATIONS} locations")
        if not isinstance(rationale, str) or not rationale.strip() \
                or len(rationale) > MAX_RATIONALE:
            raise ValueError(f"an issue's rationale is text of 1 to {MAX_RATIONALE:,} "
                             f"characters")
        if severity is not None and severity not in SEVERITIES:
            raise ValueError(f"severity is one of {', '.join(SEVERITIES)} (or None), "
                             f"not {str(severity)[:40]!r}")
        self._issues += 1
        issue_id = f"i{self._issues}"
        self.report("issue.reported", {"issue_id": issue_id, "rationale": rationale,
                                       "locations": places, "severity": severity})
        return issue_id

    def conversation(self, system: str | None = None,
                     template: str | None = None) -> Conversation:
        """A model conversation of this run (its system prompt recorded as the prompt)."""
        return Conversation(self, system, template)


class Conversation:
    """A conversation with a model, recorded as props reads it: every message stored once as
    a blob (a transcript of N turns costs O(N) bytes, and each message counts once against
    the run's caps), each request listing its messages by hash (`llm.requested`), each
    answer with its tokens, cost and latency (`llm.responded`). The model call itself is the
    agent's: `messages` is what to send."""

    def __init__(self, agent: Agent, system: str | None = None,
                 template: str | None = None) -> None:
        self.agent = agent
        self.messages: list[dict[str, Any]] = []
        self.spent_usd = 0.0
        self._shas: list[str] = []
        self._requests = 0
        if system is not None:
            agent.prompt(system, template)
            self.add("system", system)

    def add(self, role: str, content: str) -> None:
        self.messages.append({"role": role, "content": content})

    @property
    def over_budget(self) -> bool:
        """Whether the run's budget is spent (a budget of 0: no limit)."""
        return self.spent_usd >= self.agent.task.budget_usd > 0

    def _store(self) -> list[str]:
        for message in self.messages[len(self._shas):]:
            self._shas.append(self.agent.put_blob(
                json.dumps(message, sort_keys=True).encode()))
        return list(self._shas)

    def request(self, model: str | None = None) -> str:
        """Record that `messages` go to the model (the run's model unless named); returns
        the request's id (r1, r2, ...) for `respond`."""
        self._requests += 1
        request_id = f"r{self._requests}"
        self.agent.report("llm.requested", {
            "request_id": request_id, "model": model or self.agent.task.model,
            "message_sha256s": self._store()})
        return request_id

    def respond(self, request_id: str, content: str, *, tokens_in: int, tokens_out: int,
                cost_usd: float, latency_ms: float) -> None:
        """Record the model's answer to `request_id` and add it to the conversation."""
        self.add("assistant", content)
        [*_, sha] = self._store()
        self.spent_usd += cost_usd
        self.agent.report("llm.responded", {
            "request_id": request_id, "response_sha256": sha, "tokens_in": tokens_in,
            "tokens_out": tokens_out, "cost_usd": cost_usd, "latency_ms": latency_ms})

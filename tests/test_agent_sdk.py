"""The agent SDK: small (the standard library, psycopg when it connects: no asyncpg, anyio,
tenacity or pydantic), speaking the protocol the launcher accepts. Its reports are drained
by the launcher's own code into a real run's stream, so each is checked against the catalog
exactly as a container's are."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from props.core.domain import caps, catalog
from props.core.log.store import EventStore
from props.reactors.agents import sdk
from props.reactors.launcher import agent_roles, run_specs

SDK_FILE = Path(sdk.__file__)
MAX_MODULES = 60
HEAVY = ("asyncpg", "anyio", "tenacity", "pydantic", "props.core", "psycopg")

_COUNT = """import json, sys
before = set(sys.modules)
import {module}
new = sorted(set(sys.modules) - before)
print(json.dumps(new))
"""


def modules_loaded_by(module: str, *flags: str, path: Path | None = None) -> list[str]:
    """The modules `import module` loads beyond the interpreter's startup, in a new
    interpreter (`path` first on its import path)."""
    code = (f"import sys; sys.path.insert(0, {str(path)!r})\n" if path else "") + \
        _COUNT.format(module=module)
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True,
                          text=True, timeout=120, check=True)
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def _heavy(loaded: list[str]) -> list[str]:
    return [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_the_sdk_loads_at_most_60_modules_and_no_asyncpg() -> None:
    loaded = modules_loaded_by("props.reactors.agents.sdk")
    assert len(loaded) <= MAX_MODULES, loaded
    assert _heavy(loaded) == []


def test_negative_control_the_module_count_sees_a_heavy_import() -> None:
    """What the SDK imported before it stood alone (the catalog, hence pydantic and the
    log's retries, hence asyncpg and tenacity) fails both checks above."""
    loaded = modules_loaded_by("props.core.domain.catalog, props.core.log.retries")
    assert len(loaded) > MAX_MODULES
    assert {"pydantic", "asyncpg", "tenacity"} <= set(_heavy(loaded))


def test_the_sdk_file_stands_alone(tmp_path: Path) -> None:
    """Copied into an image under any name, it imports with no site-packages at all (psycopg
    is imported on connect), and names nothing but the standard library and psycopg."""
    shutil.copy(SDK_FILE, tmp_path / "props_agent.py")
    loaded = modules_loaded_by("props_agent", "-I", "-S", path=tmp_path)
    assert len(loaded) <= MAX_MODULES and _heavy(loaded) == []
    tree = ast.parse(SDK_FILE.read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}
    assert roots - set(sys.stdlib_module_names) == {"psycopg"}


# -- against a real run's role ---------------------------------------------------------------


@pytest.fixture
async def agent(store: EventStore, tmp_path: Path) -> AsyncIterator[sdk.Agent]:
    """An SDK Agent connected as a real run's role (made as the launcher makes it), told its
    task in the JSON the launcher writes."""
    run_id = uuid.uuid4()
    creds = await agent_roles.create(store, run_id, caps.Caps(
        max_events=50, max_bytes=100_000))
    task = run_specs.Task(run_id=run_id, agent_type="critic", model="m",
                          example=catalog.Example(snapshot="csvtool/2025-09-03-00"),
                          config={"k": 1}, timeout_seconds=60, budget_usd=0.5)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    dsn = agent_roles.agent_dsn(store.dsn, creds.role, creds.password)
    a = await anyio.to_thread.run_sync(
        sdk.Agent, sdk.Task.from_json(task.model_dump_json()), tmp_path, dsn)
    try:
        yield a
    finally:
        a.__exit__(None, None, None)
        await agent_roles.drop(store, run_id)


async def _drained(store: EventStore, run_id: uuid.UUID) -> list[object]:
    """What the launcher appends of the run's reports (each checked against the catalog)."""
    totals = await agent_roles.drain(store, run_id, set(), agent_roles.Drained())
    assert totals.malformed is None
    return [r.event for r in await store.read_stream(f"run-{run_id}")]


async def test_the_task_reads_what_the_launcher_writes(agent: sdk.Agent) -> None:
    task = agent.task
    assert (task.agent_type, task.model, task.config, task.budget_usd) == ("critic", "m",
                                                                         {"k": 1}, 0.5)
    assert task.example == sdk.Example("csvtool/2025-09-03-00", None)
    assert list(agent.files()) == ["pkg/a.py"]


async def test_issues_are_numbered_and_pass_the_catalog(agent: sdk.Agent,
                                                        store: EventStore) -> None:
    def review() -> list[str]:
        return [agent.issue("pkg/a.py", 1, 1, "first", "high"),
                agent.issue("pkg/a.py", 1, 2, "second", also=[("pkg/b.py", 3, 4)])]

    assert await anyio.to_thread.run_sync(review) == ["i1", "i2"]
    events = await _drained(store, agent.run_id)
    issues = [e for e in events if isinstance(e, catalog.IssueReported)]
    assert [(i.issue_id, i.severity, [loc.file for loc in i.locations]) for i in issues] == [
        ("i1", "high", ["pkg/a.py"]), ("i2", None, ["pkg/a.py", "pkg/b.py"])]
    assert issues[1].locations[0].ranges == [catalog.LineRange(start=1, end=2)]


@pytest.mark.parametrize("args", [
    ("", 1, 1, "r"), ("/etc/passwd", 1, 1, "r"), ("a.py", 0, 1, "r"), ("a.py", 3, 2, "r"),
    ("a.py", 1, 2**31, "r"), ("a.py", 1, True, "r"), ("a.py", 1, 1, " "),
    ("a.py", 1, 1, "r" * 20_001), ("a.py", 1, 1, "r", "urgent")])
async def test_a_malformed_issue_is_refused_and_nothing_is_written(
        agent: sdk.Agent, store: EventStore, args: tuple[object, ...]) -> None:
    with pytest.raises(ValueError, match=r"issue|severity"):
        await anyio.to_thread.run_sync(lambda: agent.issue(*args))  # type: ignore[arg-type]
    assert await _drained(store, agent.run_id) == []
    # The refused call took no number: the next issue is still i1.
    assert await anyio.to_thread.run_sync(lambda: agent.issue("a.py", 1, 1, "r")) == "i1"


async def test_a_conversation_stores_each_message_once(agent: sdk.Agent,
                                                       store: EventStore) -> None:
    sent: list[bytes] = []
    put_blob = agent.put_blob

    def spy(content: bytes) -> str:
        sent.append(content)
        return put_blob(content)

    agent.put_blob = spy  # type: ignore[method-assign]

    def talk() -> sdk.Conversation:
        chat = agent.conversation("be terse", template="t")
        for turn in ("file one", "file two"):
            chat.add("user", turn)
            request_id = chat.request()
            chat.respond(request_id, f"ok {turn}", tokens_in=10, tokens_out=2,
                         cost_usd=0.25, latency_ms=5)
        return chat

    chat = await anyio.to_thread.run_sync(talk)
    assert chat.over_budget  # 0.5 USD of 0.5
    events = await _drained(store, agent.run_id)
    requested = [e for e in events if isinstance(e, catalog.LlmRequested)]
    responded = [e for e in events if isinstance(e, catalog.LlmResponded)]
    assert [r.request_id for r in requested] == ["r1", "r2"]
    assert len(requested[1].message_sha256s) == 4  # system, user, assistant, user
    assert requested[1].message_sha256s[:2] == requested[0].message_sha256s
    assert requested[1].message_sha256s[2] == responded[0].response_sha256
    # Each message was sent (and charged against the run's caps) once: the prompt, then
    # each message of the conversation, nothing twice.
    assert sent == [b"be terse", *(json.dumps(m, sort_keys=True).encode()
                                   for m in chat.messages)]


async def test_catalog_events_are_reported_as_before(agent: sdk.Agent,
                                                     store: EventStore) -> None:
    """The bundled agents (the grader, the LLM critic) report props' own events."""
    phase = catalog.PhaseCompleted(run_id=agent.run_id, phase="review", duration_seconds=1)
    await anyio.to_thread.run_sync(agent.report, phase)
    with pytest.raises(ValueError, match=r"cannot report run\.finished"):
        await anyio.to_thread.run_sync(agent.report, "run.finished", {})
    assert await _drained(store, agent.run_id) == [phase]


async def test_the_documented_protocol_works_without_the_sdk(agent: sdk.Agent,
                                                              store: EventStore) -> None:
    """What docs/howto/write-a-critic.md tells a critic in another language: plain SQL, the
    event's id its own (sent twice, recorded once), the data as the page shows it."""
    data = {"issue_id": "i1", "rationale": "leaks the handle", "locations": [
        {"file": "csvtool/reader.py", "ranges": [{"start": 22, "end": 23}]}]}

    def raw() -> list[object]:
        import psycopg

        with psycopg.connect(agent._dsn, autocommit=True) as conn:
            event_id = conn.execute("SELECT gen_random_uuid()").fetchone()
            assert event_id is not None
            return [conn.execute("SELECT agent.report(%s, 'issue.reported', %s::jsonb)",
                                 (event_id[0], json.dumps(data))).fetchone()
                    for _ in range(2)]

    assert await anyio.to_thread.run_sync(raw) == [(True,), (True,)]
    [event] = await _drained(store, agent.run_id)
    assert isinstance(event, catalog.IssueReported) and event.issue_id == "i1"

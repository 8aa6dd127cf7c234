"""The LLM critic against a local server that replays recorded OpenAI-format answers.

The server is real HTTP on loopback (no mock of the client): it answers each request with the
answer recorded for the file the request's last message shows, and records what it was sent.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from props.core.domain import catalog, definitions
from props.core.log.store import EventStore
from props.reactors.agents.llm_critic import parse_issues
from tests.fake_openai import chat_server
from tests.reactor_helpers import eventually, finished, request

REPLAY = json.loads((Path(__file__).parent / "fixtures" / "openai_replay.json").read_text())
COMMAND = [sys.executable, "-m", "props.reactors.agents.llm_critic"]


def _replay(body: dict[str, Any]) -> dict[str, Any]:
    """The answer recorded for the file the request's last message shows."""
    last = body["messages"][-1]["content"]
    name = last.split("\n", 1)[0].removeprefix("File ").rstrip(":")
    answer: dict[str, Any] = REPLAY["by_file"].get(name, REPLAY["default"])
    return answer


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with chat_server(_replay) as served:
        yield served


async def push_llm(store: EventStore, name: str, config: dict[str, Any]) -> None:
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name=name, tag="test", runtime="local", image="local:llm",
        command=COMMAND, config=config, digest=definitions.local_digest(COMMAND, config),
        limits=catalog.AgentLimits(network=True)))


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
    assert done.status == "completed", done
    records = await store.read_stream(f"run-{run_id}")
    requests = [r.event for r in records if isinstance(r.event, catalog.LlmRequested)]
    responses = [r.event for r in records if isinstance(r.event, catalog.LlmResponded)]
    assert len(requests) == len(responses) == len(seen) == 5  # one per Python file
    assert {s["auth"] for s in seen} == {"Bearer sk-test-KEEP-OUT-OF-THE-LOG"}
    assert {s["body"]["model"] for s in seen} == {"test-model"}  # the run's model
    # The conversation grows by two messages a turn, each message stored once.
    assert [len(r.message_sha256s) for r in requests] == [2, 4, 6, 8, 10]
    for earlier, later in itertools.pairwise(requests):
        assert later.message_sha256s[:len(earlier.message_sha256s)] == earlier.message_sha256s
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
    await push_llm(served, "pricey", {"base_url": url, "price_in_per_mtok": 1000})
    [run_id] = await request(served, "pricey", budget=0.5)
    done = (await finished(served, [run_id]))[run_id]
    assert done.status == "budget_exceeded" and done.cost_usd > 0.5
    assert len(seen) < 5  # it stopped before reviewing every file


async def test_llm_critic_with_a_dead_endpoint_fails_with_closed_facts(
        served: EventStore) -> None:
    await push_llm(served, "dead", {"base_url": "http://127.0.0.1:9/v1"})
    [run_id] = await request(served, "dead")
    done = (await finished(served, [run_id]))[run_id]
    assert done.status == "failed" and done.failure is not None
    assert (done.failure.category, done.failure.exit_code) == ("exit_nonzero", 4)


def test_answers_are_parsed_strictly() -> None:
    answer = 'Sure! {"issues": [{"start": 2, "end": 3, "rationale": "x", "severity": "odd"},' \
             ' {"start": 9, "rationale": "past the end"}, {"end": 1}]}'
    assert parse_issues(answer, "a.py", 5) == [(2, 3, "x", None)]
    assert parse_issues("no JSON here", "a.py", 5) == []
    assert parse_issues('{"issues": "nope"', "a.py", 5) == []

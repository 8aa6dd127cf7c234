"""Faults of real servers, as the LLM critic meets them: each is a closed fact on the run
(`llm_<outcome>`, retryable or not) or a retry that succeeds, never a review that found
nothing. The server is a fake of the *server* (real HTTP on loopback, tests/fake_openai.py):
it refuses, drops, stalls, answers 5xx bursts, 429 with Retry-After, bodies that are not JSON
and answers that are not the JSON asked for. tests/test_real_model.py kills a real one.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from props.core.domain import catalog, chat
from props.core.log import retries
from props.core.log.store import EventStore
from tests.conftest import once_per_ci
from tests.fake_openai import Reply, chat_server, completion
from tests.reactor_helpers import eventually, finished, request
from tests.test_llm_critic import push_llm

pytestmark = once_per_ci  # what it checks does not depend on the server's kind

PER_FILE = {"mode": "per-file", "structured": "json_schema"}
NO_ISSUES = completion('{"issues": []}')


async def _run(store: EventStore, config: dict[str, Any], run_seconds: float = 60
               ) -> tuple[catalog.RunFinished, list[Any]]:
    await push_llm(store, "faulty", {**PER_FILE, **config})
    [run_id] = await request(store, "faulty", timeout_seconds=run_seconds)
    done = (await finished(store, [run_id]))[run_id]
    return done, [r.event for r in await store.read_stream(f"run-{run_id}")]


def _outcomes(events: list[Any]) -> list[str]:
    return [e.outcome for e in events if isinstance(e, catalog.LlmResponded)]


async def test_a_server_that_refuses_connections_is_a_retryable_closed_fact(
        served: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    done, events = await _run(served, {"base_url": "http://127.0.0.1:9/v1"})
    assert done.status == "failed" and done.failure is not None
    assert (done.failure.phase, done.failure.category, done.failure.retryable,
            done.failure.exit_code) == ("llm", "llm_unreachable", True, 4)
    assert _outcomes(events) == ["unreachable"]


async def test_a_connection_dropped_mid_answer_is_retried_then_a_closed_fact(
        served: EventStore) -> None:
    with chat_server(lambda body: Reply(drop=True)) as (url, seen):
        done, events = await _run(served, {"base_url": url})
    assert done.failure is not None and done.failure.category == "llm_reset"
    assert len(seen) == retries.MODEL_CALL.attempts  # every attempt, then the fact
    assert _outcomes(events) == ["reset"]


async def test_a_5xx_burst_is_retried_and_the_run_completes(served: EventStore) -> None:
    count = itertools.count()

    def burst(body: dict[str, Any]) -> dict[str, Any] | Reply:
        if next(count) < 2:
            return Reply(status=503, body=b'{"error": "loading model"}',
                         headers={"Retry-After": "0"})
        return NO_ISSUES

    with chat_server(burst) as (url, seen):
        done, events = await _run(served, {"base_url": url})
    assert done.status == "completed", done
    assert len(seen) == 2 + 5  # two refused, then one per file
    assert _outcomes(events) == ["answered"] * 5  # the retries are inside one recorded call
    answers = [e for e in events if isinstance(e, catalog.LlmResponded)]
    assert {(a.finish_reason, a.cached_tokens, a.structured) for a in answers} == {
        ("stop", 50, "json_schema")}


async def test_a_body_that_is_not_json_is_a_closed_fact_not_retried(
        served: EventStore) -> None:
    with chat_server(lambda body: Reply(body=b"<html>proxy error</html>")) as (url, seen):
        done, events = await _run(served, {"base_url": url})
    assert done.failure is not None and (done.failure.category, done.failure.retryable) == (
        "llm_malformed_body", False)
    assert len(seen) == 1 and _outcomes(events) == ["malformed_body"]


async def test_an_unreadable_answer_makes_the_run_broken_not_a_scored_zero(
        served: EventStore) -> None:
    """Negative control of the old critic, which parsed this as 0 issues and completed."""
    answer = completion("I think the code looks fine overall, no issues.")
    with chat_server(lambda body: answer) as (url, _):
        done, events = await _run(served, {"base_url": url})
    assert done.status == "failed" and done.failure is not None
    assert done.failure.category == "llm_unreadable"
    assert not [e for e in events if isinstance(e, catalog.IssueReported)]
    cut = completion('{"issues": [{"start": 1, "end": 2, "sev', finish_reason="length")
    with chat_server(lambda body: cut) as (url, _):
        done, _ = await _run(served, {"base_url": url})
    assert done.failure is not None and done.failure.category == "llm_truncated"


async def test_a_context_overflow_is_a_closed_fact(served: EventStore) -> None:
    refusal = Reply(status=400, body=json.dumps({"error": {
        "message": "Requested tokens (2300) exceed context window of 2048",
        "code": "context_length_exceeded"}}).encode())
    with chat_server(lambda body: refusal) as (url, seen):
        done, events = await _run(served, {"base_url": url})
    assert done.failure is not None and done.failure.category == "llm_overflow"
    assert len(seen) == 1 and _outcomes(events) == ["overflow"]  # not a form refused
    [responded] = [e for e in events if isinstance(e, catalog.LlmResponded)]
    assert responded.http_status == 400


async def test_a_slow_answer_past_the_request_timeout_and_past_the_run_timeout(
        served: EventStore) -> None:
    slow = Reply(body=json.dumps(NO_ISSUES).encode(), delay=3)
    with chat_server(lambda body: slow) as (url, _):
        done, events = await _run(served, {"base_url": url, "request_timeout": 0.5})
        assert done.failure is not None and done.failure.category == "llm_timeout"
        assert _outcomes(events) == ["timeout"]
        done, _ = await _run(served, {"base_url": url}, run_seconds=2)
    assert done.status == "timed_out"


def test_retry_after_is_honoured_up_to_its_cap() -> None:
    told = chat.CallFailed("http_error", 429, retry_after=7.0)
    assert chat.wait_before_retry(told, 1) == 7.0
    assert chat.wait_before_retry(chat.CallFailed("http_error", 503), 1) == \
        retries.MODEL_CALL.delay(1)  # the negative control: no header, the policy's backoff
    assert told.transient and chat.CallFailed("http_error", 503).transient
    assert not chat.CallFailed("http_error", 400).transient
    with chat_server(lambda body: Reply(status=429, headers={"Retry-After": "86400"},
                                        body=b"{}")) as (url, _):
        endpoint = chat.Endpoint(base_url=url, model="m")
        with pytest.raises(chat.CallFailed) as caught:
            import httpx
            with httpx.Client() as client:
                endpoint._post(client, endpoint.body([]))
    assert caught.value.retry_after == retries.MODEL_RETRY_AFTER_CAP


async def test_the_agentic_mode_lists_reads_and_reports_through_tool_calls(
        served: EventStore) -> None:
    def call(name: str, **args: Any) -> dict[str, Any]:
        return {"id": f"c-{name}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}}

    script = iter([[call("list_files")],
                   [call("read_file", path="csvtool/cli.py", start=30, end=45)],
                   [call("report_issue", path="csvtool/cli.py", start=38, end=39,
                         severity="medium", rationale="head prints one row fewer"),
                    call("report_issue", path="nowhere.py", start=1, end=1, rationale="x")],
                   [call("finish")]])

    def agent(body: dict[str, Any]) -> dict[str, Any]:
        assert body["tools"] and "response_format" not in body
        return completion("", finish_reason="tool_calls", tool_calls=next(script))

    with chat_server(agent) as (url, seen):
        await push_llm(served, "agentic", {"base_url": url})
        [run_id] = await request(served, "agentic")
        done = (await finished(served, [run_id]))[run_id]
    assert done.status == "completed", done
    events = [r.event for r in await served.read_stream(f"run-{run_id}")]
    assert [e.phase for e in events if isinstance(e, catalog.PhaseCompleted)] == [
        "review-tools"]
    tool_results = seen[2]["body"]["messages"][-1]
    assert tool_results["role"] == "tool" and "  38 |" in tool_results["content"]
    assert seen[3]["body"]["messages"][-1]["content"].startswith("error: no such file")
    issues = [e for e in events if isinstance(e, catalog.IssueReported)]
    assert [(i.locations[0].file, i.locations[0].ranges[0].start) for i in issues] == [
        ("csvtool/cli.py", 38)]
    assert [e.tool_calls for e in events if isinstance(e, catalog.LlmResponded)] == [
        1, 1, 2, 1]

    async def graded() -> bool:
        return len([r for r in await served.read_stream(f"grading-{run_id}-tiered@2")
                    if not isinstance(r.event, catalog.GradesChance)]) == 1  # (and chance)

    await eventually(graded)

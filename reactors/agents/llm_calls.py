"""What both modes of the LLM critic share: every model call recorded, the endpoint from the
definition's config, and how a file is shown (numbered lines, a cautious token count)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, cast

from props.core.domain import catalog, chat
from props.reactors.agents.sdk import Agent

SEVERITIES = ("low", "medium", "high", "critical")


def numbered(lines: list[str], first: int = 1) -> str:
    return "\n".join(f"{n:4d} | {line}" for n, line in enumerate(lines, start=first))


def estimate_tokens(text: str) -> int:
    """A cautious count (code runs near 3 bytes a token; 2.5 leaves room)."""
    return int(len(text.encode()) / 2.5) + 1


class Budget(Exception):
    """The run's budget is spent: stop before the next request."""


class Recorder:
    """Every model call of the run: its messages as blobs, `llm.requested`, the call, and
    `llm.responded` (tokens, cached tokens, finish reason, cost, latency, or the closed
    outcome of a call that gave no usable answer)."""

    def __init__(self, agent: Agent, endpoint: chat.Endpoint) -> None:
        self.agent = agent
        self.endpoint = endpoint
        self.spent = 0.0
        self.calls = 0
        self.issues = 0

    def call(self, messages: list[chat.Message], ask: Callable[[], chat.Answer]
             ) -> chat.Answer:
        task = self.agent.task
        if self.spent >= task.budget_usd > 0:
            raise Budget
        self.calls += 1
        request_id = f"r{self.calls}"
        shas = [self.agent.put_blob(json.dumps(m, sort_keys=True).encode()) for m in messages]
        self.agent.report(catalog.LlmRequested(run_id=self.agent.run_id, request_id=request_id,
                                               model=task.model, message_sha256s=shas))
        try:
            answer = ask()
        except chat.CallFailed as exc:
            self._responded(request_id, exc.answer, exc.outcome, exc.http_status)
            if exc.outcome == "over_budget":  # the gateway's account, which is the one
                raise Budget from None
            raise
        self._responded(request_id, answer, "answered", None)
        return answer

    def _responded(self, request_id: str, answer: chat.Answer | None, outcome: str,
                   status: int | None) -> None:
        if answer is None:  # no answer came: the blob holds the closed fact, nothing else
            body: dict[str, Any] = {"role": "assistant", "content": None, "outcome": outcome}
        else:
            body = answer.message
        cost = 0.0 if answer is None else self.endpoint.cost(answer)
        self.spent += cost
        self.agent.report(catalog.LlmResponded(
            run_id=self.agent.run_id, request_id=request_id,
            response_sha256=self.agent.put_blob(json.dumps(body, sort_keys=True).encode()),
            tokens_in=answer.tokens_in if answer else 0,
            tokens_out=answer.tokens_out if answer else 0,
            cost_usd=cost, latency_ms=answer.latency_ms if answer else 0.0,
            finish_reason=answer.finish_reason if answer else None,
            cached_tokens=answer.cached_tokens if answer else None,
            structured=cast(catalog.StructuredOutput, answer.structured) if answer else None,
            tool_calls=len(answer.tool_calls) if answer else None,
            outcome=cast(catalog.CallOutcome, outcome), http_status=status))

    def issue(self, path: str, start: int, end: int, rationale: str,
              severity: catalog.Severity | None) -> None:
        self.issues += 1
        self.agent.issue(path, start, end, rationale, severity)


def endpoint_of(config: dict[str, Any], model: str) -> chat.Endpoint:
    """The model, through the launcher's gateway (PROPS_GATEWAY, PROPS_GATEWAY_TOKEN): the
    run holds its own credential, never a key; the gateway forwards to the endpoint the
    config names and charges each call at that endpoint's registered prices."""
    base_url, uds, credential = chat.gateway_settings(os.environ)
    if not base_url:
        raise SystemExit("no model gateway: the definition's config names no endpoint "
                         "(\"endpoint\": \"NAME\", registered with props endpoints add)")
    structured = str(config.get("structured", "json_schema"))
    return chat.Endpoint(
        base_url=base_url, uds=uds, model=model, key=credential,
        timeout=float(config.get("request_timeout", 120)),
        max_tokens=int(config.get("max_answer_tokens", 512)),
        mode=structured if structured in chat.MODES else "json_schema")

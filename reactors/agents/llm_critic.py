"""The LLM critic: any OpenAI-compatible chat endpoint (OpenAI, Ollama, LiteLLM, vLLM, llama.cpp).

`python -m props.reactors.agents.llm_critic` inside a run's container. The definition's config:
- `endpoint` (required): the name of an endpoint the operator registered (`props endpoints
  add`); the run reaches it through the launcher's model gateway, which holds the key and the
  prices (the run holds neither) and charges each call to the run's budget;
- `request_timeout`: seconds per request (default 120);
- `mode`: `auto` (default: tools where the endpoint makes tool calls, else per file),
  `tools` or `per-file`;
- `context_tokens` (default 2048, llama.cpp's default) and `max_answer_tokens` (default 512):
  a file is reviewed in chunks whose prompt leaves room for the answer in that context;
- `structured`: the first form of structured output to try (`json_schema`, default, then
  `json_object`, then `tolerant`; core/domain/chat.py).
The model is the run's. Per file, each chunk is one request of its own (a system message and
the numbered lines: no conversation grows across files), answered in JSON constrained by a
schema. Every message is stored once as a blob and each request lists its messages by hash.
A call that gives no usable answer (unreadable, cut off, the context overflowed, the server
gone after the retries) is recorded as the call's closed outcome and ends the run with exit 4:
the launcher records the run as failed `llm_<outcome>` (broken), never as a review that found
nothing. It stops before the next request once the run's budget is spent (exit code 3).
"""

from __future__ import annotations

import sys
import time
from typing import Any, cast

from props.core.domain import catalog, chat
from props.reactors.agents import llm_tools
from props.reactors.agents.llm_calls import (
    SEVERITIES,
    Budget,
    Recorder,
    endpoint_of,
    estimate_tokens,
    numbered,
)
from props.reactors.agents.sdk import Agent

SYSTEM = """You are a meticulous code reviewer. You are shown part of a file, each line \
prefixed by its number. Report real defects only (bugs, not style), as JSON: \
{"issues": [{"start": LINE, "end": LINE, "severity": "low|medium|high|critical", \
"rationale": "why it is a defect"}]}. Answer {"issues": []} when there is no defect."""

EXIT_BUDGET = 3
EXIT_ENDPOINT = 4
MAX_ISSUES = 8  # per chunk: a schema's bound keeps a small model's answer finite
ISSUES_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["issues"],
    "properties": {"issues": {"type": "array", "maxItems": MAX_ISSUES, "items": {
        "type": "object", "additionalProperties": False,
        "required": ["start", "end", "severity", "rationale"],
        "properties": {"start": {"type": "integer", "minimum": 1},
                       "end": {"type": "integer", "minimum": 1},
                       "severity": {"type": "string", "enum": list(SEVERITIES)},
                       "rationale": {"type": "string", "maxLength": 400}}}}}}


def chunks(text: str, room: int) -> list[tuple[int, list[str]]]:
    """The file as (first line number, lines) pieces whose numbered text fits `room` tokens;
    a line longer than the room alone is cut (its number kept)."""
    out: list[tuple[int, list[str]]] = []
    piece: list[str] = []
    used, first = 0, 1
    for n, line in enumerate(text.splitlines(), start=1):
        cost = estimate_tokens(f"{n:4d} | {line}\n")
        if cost > room:
            line, cost = line[:max(1, int(room * 2.5) - 16)], room
        if piece and used + cost > room:
            out.append((first, piece))
            piece, used, first = [], 0, n
        piece.append(line)
        used += cost
    if piece:
        out.append((first, piece))
    return out


Found = tuple[int, int, str, catalog.Severity | None]


def parse_issues(data: Any, lines: int) -> list[Found]:
    """(start, end, rationale, severity) of each well-formed issue of the answer's JSON;
    line numbers outside the file are dropped, not guessed."""
    out: list[Found] = []
    items = data.get("issues") if isinstance(data, dict) else None
    for item in items if isinstance(items, list) else []:
        try:
            start, end = int(item["start"]), int(item.get("end", item["start"]))
            rationale = str(item.get("rationale", "")).strip()[:4000]
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if 1 <= start <= end <= lines and rationale:
            severity = item.get("severity")
            out.append((start, end, rationale,
                        cast(catalog.Severity, severity) if severity in SEVERITIES else None))
    return out


def review_per_file(rec: Recorder, files: list[str]) -> None:
    """Each file in chunks that fit the context, one request per chunk."""
    config = rec.agent.task.config
    context = int(config.get("context_tokens", 2048))
    room = context - int(config.get("max_answer_tokens", 512)) - estimate_tokens(SYSTEM) - 96
    if room < 64:
        raise SystemExit("context_tokens leaves no room for a file beside the answer")
    system = {"role": "system", "content": SYSTEM}
    for path in files:
        text = rec.agent.read(path)
        total = len(text.splitlines())
        for first, lines in chunks(text, room):
            last = first + len(lines) - 1
            user = {"role": "user", "content": f"File {path}, lines {first}-{last} of {total}:"
                                               f"\n{numbered(lines, first)}"}
            messages = [system, user]
            _, data = _ask_json(rec, messages)
            for start, end, rationale, severity in parse_issues(data, total):
                rec.issue(path, start, end, rationale, severity)


def _ask_json(rec: Recorder, messages: list[chat.Message]) -> tuple[chat.Answer, Any]:
    got: list[Any] = []

    def ask() -> chat.Answer:
        answer, data = rec.endpoint.ask_json(messages, ISSUES_SCHEMA, "issues")
        got.append(data)
        return answer

    answer = rec.call(messages, ask)
    return answer, got[0]


def main() -> int:
    with Agent.from_environment() as agent:
        task = agent.task
        if "endpoint" not in task.config:
            print("the definition's config names no endpoint (\"endpoint\": \"NAME\", one "
                  "the operator registered with props endpoints add)", file=sys.stderr)
            return 2
        mode = str(task.config.get("mode", "auto"))
        rec = Recorder(agent, endpoint_of(task.config, task.model))
        files = [p for p in agent.files() if p.endswith(".py")]
        began = time.monotonic()
        try:
            if mode in ("auto", "tools") and llm_tools.review_with_tools(rec, files):
                agent.phase("review-tools", began)
            else:
                agent.prompt(SYSTEM, template="llm-critic/per-file")
                review_per_file(rec, files)
                agent.phase("review-per-file", began)
        except Budget:
            print(f"budget spent: {rec.spent:.6f} of {task.budget_usd} USD", file=sys.stderr)
            return EXIT_BUDGET
        except chat.CallFailed as exc:
            print(f"the model call failed: {exc}", file=sys.stderr)
            return EXIT_ENDPOINT
        print(f"reviewed {task.example.snapshot} with {task.model}: {rec.issues} issues, "
              f"{rec.calls} calls, {rec.spent:.6f} USD")
    return 0


if __name__ == "__main__":
    sys.exit(main())

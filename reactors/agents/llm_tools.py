"""The LLM critic's agentic mode: the model lists files, reads ranges and reports issues
through tool calls, in one conversation bounded by the context and a number of turns.

Where the endpoint takes no tools (a 4xx on the first request) or the model answers the first
request without a tool call (a model or chat template that makes none), that is recorded (the
phase `no-tool-calls`) and the critic reviews per file instead (llm_critic.review_per_file).
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from props.core.domain import catalog, chat
from props.reactors.agents import llm_calls

SYSTEM = """You are a meticulous code reviewer with tools. List the files, read them in \
ranges, and call report_issue for each real defect (a bug, not style) with its file, line \
range, severity and why. Call finish when you have reviewed every file."""

MAX_READ_LINES = 200
PROBE_TOKENS = 128


def _function(name: str, description: str, properties: dict[str, Any],
              required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}}}


_LINE = {"type": "integer", "minimum": 1}
TOOLS = [
    _function("list_files", "The files to review.", {}, []),
    _function("read_file", "Lines START to END of a file, each prefixed by its number.",
              {"path": {"type": "string"}, "start": _LINE, "end": _LINE}, ["path"]),
    _function("report_issue", "Report one defect.",
              {"path": {"type": "string"}, "start": _LINE, "end": _LINE,
               "severity": {"type": "string", "enum": list(llm_calls.SEVERITIES)},
               "rationale": {"type": "string"}},
              ["path", "start", "end", "rationale"]),
    _function("finish", "End the review.", {}, []),
]


class _Session:
    def __init__(self, rec: llm_calls.Recorder, files: list[str]) -> None:
        self.rec = rec
        self.files = files
        self.texts: dict[str, list[str]] = {}
        self.done = False

    def lines(self, path: str) -> list[str]:
        if path not in self.texts:
            self.texts[path] = self.rec.agent.read(path).splitlines()
        return self.texts[path]

    def run(self, name: str, args: dict[str, Any]) -> str:
        """One tool call's result, as text the model reads (errors too: it may try again)."""
        if name == "list_files":
            return "\n".join(self.files)
        if name == "finish":
            self.done = True
            return "ok"
        path = args.get("path")
        if not isinstance(path, str) or path not in self.files:
            return "error: no such file; call list_files"
        lines = self.lines(path)
        try:
            start = int(args.get("start", 1))
            end = int(args.get("end", start + MAX_READ_LINES - 1 if name == "read_file"
                               else start))
        except (TypeError, ValueError):
            return "error: start and end are line numbers"
        if name == "read_file":
            start, end = max(1, start), min(len(lines), end, start + MAX_READ_LINES - 1)
            return llm_calls.numbered(lines[start - 1:end], start) or "(no such lines)"
        if name == "report_issue":
            rationale = str(args.get("rationale", "")).strip()[:4000]
            if not (1 <= start <= end <= len(lines)) or not rationale:
                return f"error: lines are 1 to {len(lines)} and a rationale is needed"
            severity = args.get("severity")
            self.rec.issue(path, start, end, rationale,
                           cast(catalog.Severity, severity)
                           if severity in llm_calls.SEVERITIES else None)
            return "reported"
        return f"error: no tool {name!r}"


def _arguments(call: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
    name = str(fn.get("name", ""))[:100]
    raw = fn.get("arguments", "{}")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = None
    return name, args if isinstance(args, dict) else {}


def review_with_tools(rec: llm_calls.Recorder, files: list[str]) -> bool:
    """Review with tool calls; False when the endpoint or model makes none (recorded as the
    phase `no-tool-calls`), so the caller reviews per file."""
    config = rec.agent.task.config
    room = int(config.get("context_tokens", 2048)) - int(config.get("max_answer_tokens", 512))
    max_turns = int(config.get("max_turns", 30))
    began = time.monotonic()
    rec.agent.prompt(SYSTEM, template="llm-critic/tools")
    session = _Session(rec, files)
    messages: list[chat.Message] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Review these {len(files)} files; start with list_files."}]
    for turn in range(max_turns):
        # A tool call is short: the first answer, which may be free text from a model that
        # makes none, is cut early rather than paid for in full.
        cap = PROBE_TOKENS if turn == 0 else None
        try:
            answer = rec.call(messages, lambda cap=cap: rec.endpoint.ask_tools(  # type: ignore[misc]
                messages, TOOLS, cap))
        except chat.CallFailed as exc:
            if turn == 0 and exc.form_refused:
                rec.agent.phase("no-tool-calls", began)  # the endpoint takes no tools
                return False
            raise
        if not answer.tool_calls:
            if turn == 0:
                rec.agent.phase("no-tool-calls", began)  # the model made none
                return False
            return True
        messages.append(answer.message)
        for n, call in enumerate(answer.tool_calls):
            name, args = _arguments(call)
            messages.append({"role": "tool", "tool_call_id": str(call.get("id", n))[:100],
                             "content": session.run(name, args)})
        if session.done:
            return True
        if sum(llm_calls.estimate_tokens(json.dumps(m)) for m in messages) > room:
            rec.agent.phase("context-full", began)  # the next request would not fit
            return True
    rec.agent.phase("turns-spent", began)
    return True

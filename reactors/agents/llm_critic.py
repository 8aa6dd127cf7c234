"""The LLM critic: any OpenAI-compatible chat endpoint (OpenAI, Ollama, LiteLLM, vLLM).

`python -m props.reactors.agents.llm_critic` inside a run's container. The definition's config:
- `base_url` (required): e.g. `https://api.openai.com/v1` or `http://localhost:11434/v1`;
- `api_key_env`: the name of an environment variable holding the key, which the launcher
  passes from its own environment (a key never goes into the config, hence never into the log);
- `price_in_per_mtok`, `price_out_per_mtok`: USD per million tokens, for the cost (default 0);
- `request_timeout`: seconds per request (default 120).
The model is the run's. It reviews the example one file per turn of a single conversation and
asks for JSON issues. Every message is stored once as a blob and each request lists its
messages by hash, so a transcript of N turns costs O(N) bytes. It stops before the next
request once the run's budget is spent (exit code 3); the launcher records budget_exceeded.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from typing import Any, cast

from props.core.domain import catalog
from props.reactors.agents.sdk import Agent

SYSTEM = """You are a meticulous code reviewer. For each file you are shown, report real \
defects only (bugs, not style). Answer with JSON only, in this shape:
{"issues": [{"start": LINE, "end": LINE, "severity": "low|medium|high|critical", \
"rationale": "why it is a defect"}]}
Line numbers are the ones shown at the start of each line. Answer {"issues": []} when the \
file has no defect."""

EXIT_BUDGET = 3
EXIT_ENDPOINT = 4
_JSON = re.compile(r"\{.*\}", re.DOTALL)
_SEVERITIES = {"info", "low", "medium", "high", "critical"}


def numbered(text: str) -> str:
    return "\n".join(f"{n:4d} | {line}" for n, line in enumerate(text.splitlines(), start=1))


Found = tuple[int, int, str, catalog.Severity | None]


def parse_issues(answer: str, path: str, lines: int) -> list[Found]:
    """(start, end, rationale, severity) of each well-formed issue in the model's answer;
    line numbers outside the file are dropped, not guessed."""
    found = _JSON.search(answer)
    if not found:
        return []
    try:
        data = json.loads(found.group(0))
    except ValueError:
        return []
    out: list[Found] = []
    for item in data.get("issues", []) if isinstance(data, dict) else []:
        try:
            start, end = int(item["start"]), int(item.get("end", item["start"]))
            rationale = str(item.get("rationale", "")).strip()[:4000]
        except (KeyError, TypeError, ValueError):
            continue
        if 1 <= start <= end <= lines and rationale:
            severity = item.get("severity")
            out.append((start, end, rationale,
                         cast(catalog.Severity, severity) if severity in _SEVERITIES else None))
    return out


class Endpoint:
    def __init__(self, config: dict[str, Any]) -> None:
        self.url = str(config["base_url"]).rstrip("/") + "/chat/completions"
        key_env = config.get("api_key_env")
        self.key = os.environ.get(str(key_env), "") if key_env else ""
        self.timeout = float(config.get("request_timeout", 120))
        self.price_in = float(config.get("price_in_per_mtok", 0)) / 1e6
        self.price_out = float(config.get("price_out_per_mtok", 0)) / 1e6

    def chat(self, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
        body = json.dumps({"model": model, "messages": messages, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer


def main() -> int:
    with Agent.from_environment() as agent:
        task = agent.task
        if "base_url" not in task.config:
            print("the definition's config has no base_url", file=sys.stderr)
            return 2
        endpoint = Endpoint(task.config)
        messages = [{"role": "system", "content": SYSTEM}]
        agent.prompt(SYSTEM, template="llm-critic/system")
        spent, n = 0.0, 0
        began = time.monotonic()
        for turn, path in enumerate(p for p in agent.files() if p.endswith(".py")):
            if spent >= task.budget_usd > 0:
                print(f"budget spent: {spent:.6f} of {task.budget_usd} USD", file=sys.stderr)
                return EXIT_BUDGET
            text = agent.read(path)
            messages.append({"role": "user", "content": f"File {path}:\n{numbered(text)}"})
            shas = [agent.put_blob(json.dumps(m, sort_keys=True).encode()) for m in messages]
            request_id = f"r{turn + 1}"
            agent.report(catalog.LlmRequested(run_id=agent.run_id, request_id=request_id,
                                              model=task.model, message_sha256s=shas))
            t0 = time.monotonic()
            try:
                answer = endpoint.chat(task.model, messages)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                # The class only: a message could echo a URL with credentials in it.
                print(f"the endpoint failed: {type(exc).__name__}", file=sys.stderr)
                return EXIT_ENDPOINT
            latency = (time.monotonic() - t0) * 1000
            content = str(answer["choices"][0]["message"]["content"])
            usage = answer.get("usage") or {}
            t_in, t_out = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
            cost = t_in * endpoint.price_in + t_out * endpoint.price_out
            spent += cost
            reply = {"role": "assistant", "content": content}
            agent.report(catalog.LlmResponded(
                run_id=agent.run_id, request_id=request_id,
                response_sha256=agent.put_blob(json.dumps(reply, sort_keys=True).encode()),
                tokens_in=t_in, tokens_out=t_out, cost_usd=cost, latency_ms=latency))
            messages.append(reply)
            for start, end, rationale, severity in parse_issues(content, path,
                                                                len(text.splitlines())):
                n += 1
                agent.issue(path, start, end, rationale, severity)
        agent.phase("review", began)
        print(f"reviewed {task.example.snapshot} with {task.model}: {n} issues, "
              f"{spent:.6f} USD")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One way to ask an OpenAI-compatible chat endpoint, shared by the LLM critic and the judge.

Models as people run them differ in what they take, so every request here says what it
needs and records what it got:
- structured output: a JSON schema in `response_format`, in the form the server takes:
  OpenAI's `{"type": "json_schema", ...}` first, then llama.cpp's `{"type": "json_object",
  "schema": ...}`, and where a server takes neither, free text whose first JSON object is
  read (`tolerant`, recorded as such on every answer, so a figure can be told apart);
- tool calls, where the endpoint makes them;
- `usage` (prompt, completion and cached tokens), `finish_reason`, latency per call.
A call that gives no usable answer raises `CallFailed` with a closed outcome (the catalog's
`CallOutcome`: unreachable, reset, timeout, http_error with its status, overflow of the
context, malformed_body, and, for an answer that came but cannot be read as asked,
unreadable, truncated, refused): never a message of the server's, which could carry anything.
Transient failures (unreachable, reset mid-answer, 429, 5xx) are retried under
`retries.MODEL_CALL`, honouring `Retry-After`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import httpx
import orjson

from props.core.log import faults, retries

Message = dict[str, Any]
MODES = ("json_schema", "json_object", "tolerant")  # the order they are tried in
_MAX_BODY = 16 * 1024 * 1024  # bytes of an answer read at most
GATEWAY_COST = "props_cost_usd"  # the model gateway's charge for the call, in its answer
GATEWAY_OUTCOME = "X-Props-Outcome"  # the gateway's closed outcome of a call not forwarded


GATEWAY_VARIABLE = "PROPS_GATEWAY"  # unix:PATH of the gateway's socket, or its URL
CREDENTIAL_VARIABLE = "PROPS_GATEWAY_TOKEN"  # the run's own credential for it


def gateway_settings(environ: Mapping[str, str]) -> tuple[str, str | None, str]:
    """For a run's agent: the gateway's base URL, the Unix socket to reach it through (None:
    over TCP) and the run's credential (props.reactors.gateway gives a run these)."""
    where = environ.get(GATEWAY_VARIABLE, "")
    credential = environ.get(CREDENTIAL_VARIABLE, "")
    if where.startswith("unix:"):
        return "http://gateway/v1", where.removeprefix("unix:"), credential
    return where, None, credential


class CallFailed(Exception):
    """A model call that gave no usable answer; `outcome` is the closed fact."""

    def __init__(self, outcome: str, http_status: int | None = None,
                 retry_after: float | None = None, answer: Answer | None = None,
                 form_refused: bool = False) -> None:
        super().__init__(outcome if http_status is None else f"{outcome} (HTTP {http_status})")
        self.outcome = outcome
        self.http_status = http_status
        self.retry_after = retry_after
        self.answer = answer  # the answer that came, if one did (unreadable, truncated)
        # The server refused the request's form (its response_format, its tools): asking
        # again in the same form would fail again; another form may not.
        self.form_refused = form_refused or (outcome == "http_error"
                                             and http_status in (400, 415, 422))

    @property
    def transient(self) -> bool:
        """Whether the call is tried again now, under MODEL_CALL: what the retry rule calls
        retryable (props.core.log.faults), but neither a timeout (the call took its time
        already: the run may be retried, not the call) nor a form of request the server
        refused (the same form is refused again; another may not be)."""
        return (faults.decide(f"llm_{self.outcome}", "llm",
                              http_status=self.http_status).retryable
                and self.outcome != "timeout" and not self.form_refused)


@dataclasses.dataclass
class Answer:
    """One chat completion as the server gave it, and what props read of it."""

    content: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    tokens_in: int
    tokens_out: int
    cached_tokens: int | None
    latency_ms: float
    structured: str  # json_schema, json_object, tolerant, tools or none
    refusal: bool = False
    cost_usd: float | None = None  # what the model gateway charged (its registered prices)

    @property
    def message(self) -> Message:
        """The assistant's message, as it goes back into a conversation and into its blob."""
        out: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


def read_json(content: str, tolerant: bool) -> Any:
    """The JSON object an answer holds, or None. Strict: the whole answer (a code fence
    around it allowed); tolerant: the first balanced `{...}` in free text."""
    text = content.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        if not tolerant:
            return None
    start = text.find("{")
    while start != -1:
        depth, quoted, escaped = 0, False, False
        for i in range(start, len(text)):
            c = text[i]
            if quoted:
                escaped, quoted = (False, quoted) if escaped else (c == "\\", c != '"')
            elif c == '"':
                quoted = True
            elif c in "{}":
                depth += 1 if c == "{" else -1
                if depth == 0:
                    try:
                        return orjson.loads(text[start:i + 1])
                    except orjson.JSONDecodeError:
                        break
        start = text.find("{", start + 1)
    return None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), retries.MODEL_RETRY_AFTER_CAP)


def _overflow(response: httpx.Response) -> bool:
    """The server says the prompt and answer do not fit its context (llama.cpp: "exceed
    context window", OpenAI: context_length_exceeded)."""
    text = response.text[:4000].lower()
    return "context" in text and ("exceed" in text or "too long" in text
                                  or "context_length" in text)


@dataclasses.dataclass
class Endpoint:
    """An endpoint, a model, its prices and settings; `mode` is the structured-output form
    last taken (the next request starts there)."""

    base_url: str
    model: str
    key: str = ""
    uds: str | None = None  # a Unix socket the requests go through (the model gateway's)
    timeout: float = 120.0
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    temperature: float = 0.0
    seed: int | None = None
    max_tokens: int | None = None
    mode: str = "json_schema"

    def cost(self, answer: Answer) -> float:
        if answer.cost_usd is not None:
            return answer.cost_usd
        return (answer.tokens_in * self.price_in_per_mtok
                + answer.tokens_out * self.price_out_per_mtok) / 1e6

    def body(self, messages: list[Message], **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "messages": messages,
                               "temperature": self.temperature}
        if self.seed is not None:
            out["seed"] = self.seed
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        out.update(extra)
        return out

    # -- one HTTP attempt, then the policy around it ------------------------------------------

    def _post(self, client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        url = self.base_url.rstrip("/") + "/chat/completions"
        try:
            response = client.post(url, headers=headers, content=orjson.dumps(body))
        except httpx.ConnectError:
            raise CallFailed("unreachable") from None
        except httpx.TimeoutException:
            raise CallFailed("timeout") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            raise CallFailed("reset") from None
        except httpx.HTTPError:  # the class only: a message could echo a URL with a secret
            raise CallFailed("unreachable") from None
        if response.status_code >= 400:
            # The model gateway says what became of a call it could not forward.
            said = response.headers.get(GATEWAY_OUTCOME, "")
            if said in ("unreachable", "reset", "timeout", "over_budget"):
                raise CallFailed(said, None if said != "over_budget" else 402)
            if response.status_code == 400 and _overflow(response):
                raise CallFailed("overflow", 400)
            # llama-cpp-python answers a response_format it does not know with HTTP 500
            # and a validation message naming the field.
            refused = any(field in response.text[:4000]
                          for field in ("response_format", "'tools'", '"tools"'))
            raise CallFailed("http_error", response.status_code, _retry_after(response),
                             form_refused=refused)
        if len(response.content) > _MAX_BODY:
            raise CallFailed("malformed_body", response.status_code)
        try:
            answer = orjson.loads(response.content)
            if not isinstance(answer, dict) or not isinstance(answer["choices"][0], dict):
                raise TypeError
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise CallFailed("malformed_body", response.status_code) from None
        return answer

    def post(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """The server's JSON answer and the latency of the attempt that gave it (ms),
        retried under MODEL_CALL while the failure is transient."""
        def attempt() -> tuple[dict[str, Any], float]:
            started = time.monotonic()
            transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
            with httpx.Client(timeout=self.timeout, transport=transport) as client:
                answer = self._post(client, body)
            return answer, (time.monotonic() - started) * 1000

        result: tuple[dict[str, Any], float] = retries.MODEL_CALL.retrying_sync(
            lambda exc: isinstance(exc, CallFailed) and exc.transient,
            wait=wait_before_retry)(attempt)
        return result

    # -- what callers ask -----------------------------------------------------------------------

    def ask_json(self, messages: list[Message], schema: dict[str, Any], name: str
                 ) -> tuple[Answer, Any]:
        """An answer constrained to `schema` in the first form the server takes, and the
        JSON it holds. Raises CallFailed (unreadable, truncated, refused: with the answer)."""
        for mode in MODES[MODES.index(self.mode):]:
            try:
                raw, latency = self.post(self.body(messages, **_response_format(mode, schema,
                                                                                name)))
            except CallFailed as exc:
                if exc.form_refused and mode != MODES[-1]:
                    continue  # the server takes another form, or none
                raise
            self.mode = mode
            answer = _answer(raw, latency, mode)
            data = read_json(answer.content, tolerant=mode == "tolerant")
            if answer.refusal:
                raise CallFailed("refused", answer=answer)
            if not isinstance(data, dict):
                raise CallFailed("truncated" if answer.finish_reason == "length"
                                 else "unreadable", answer=answer)
            return answer, data
        raise AssertionError("unreachable: the last form raises")

    def ask_tools(self, messages: list[Message], tools: list[dict[str, Any]],
                  max_tokens: int | None = None) -> Answer:
        """An answer that may call `tools` (OpenAI's function tools)."""
        extra: dict[str, Any] = {"tools": tools, "tool_choice": "auto"}
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        raw, latency = self.post(self.body(messages, **extra))
        return _answer(raw, latency, "tools")


def wait_before_retry(failure: BaseException, retry: int) -> float:
    """Seconds before retry number `retry`: the policy's backoff, or longer when the server
    said how long (Retry-After, capped)."""
    after = failure.retry_after if isinstance(failure, CallFailed) else None
    return max(after or 0.0, retries.MODEL_CALL.delay(retry))


def _response_format(mode: str, schema: dict[str, Any], name: str) -> dict[str, Any]:
    if mode == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "schema": schema, "strict": True}}}
    if mode == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and 0 <= value <= 10**9 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _answer(raw: dict[str, Any], latency: float, structured: str) -> Answer:
    choice = _dict(raw["choices"][0])
    message = _dict(choice.get("message"))
    calls = message.get("tool_calls")
    usage = _dict(raw.get("usage"))
    cached = _dict(usage.get("prompt_tokens_details")).get("cached_tokens")
    reason = choice.get("finish_reason")
    content = message.get("content")
    return Answer(
        content=content if isinstance(content, str) else "",
        tool_calls=[c for c in calls if isinstance(c, dict)][:100]
        if isinstance(calls, list) else [],
        finish_reason=reason[:40] if isinstance(reason, str) else None,
        tokens_in=_int(usage.get("prompt_tokens")), tokens_out=_int(usage.get("completion_tokens")),
        cached_tokens=_int(cached) if cached is not None else None,
        latency_ms=latency, structured=structured,
        refusal=bool(message.get("refusal")) or reason == "content_filter",
        cost_usd=_cost(raw.get(GATEWAY_COST)))


def _cost(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1e6:
        return float(value)
    return None

"""The model gateway: how a run reaches its model without ever holding a key.

The launcher serves OpenAI's chat completions (`POST /v1/chat/completions`, no streaming) on
a Unix socket in a directory it mounts into each run's container (a run needs no network for
it, as for the database's socket); a local process reaches the same socket on the host. A run
authenticates with its own credential (`PROPS_GATEWAY_TOKEN`, an HMAC of its run id under a
secret that never leaves the launcher's folder), valid only while the launcher holds the run:
it dies with the run (`retire`).

For each call the gateway
- forwards only to the endpoint the run's definition names and the operator granted to its
  digest (core/domain/endpoints.py), with the model the run was requested with;
- attaches the key itself, from the variable of its own environment the endpoint's
  registration names, and scrubs that key from whatever comes back;
- refuses the call once the run's budget is spent (the evaluation's budget is shared out as
  the runs' budgets, so it holds too), clamps the answer's tokens to the endpoint's limit,
  and keeps the endpoint's rate;
- records `gateway.called` (endpoint name, tokens, cost at the registered prices, latency,
  the closed outcome): never the key, never a header.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import secrets
import socket
import stat
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from props.core.domain import catalog, chat, endpoints, streams
from props.core.log import errors, stopping
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.reactors import http_hosting

log = logging.getLogger("props.gateway")

SOCKET_NAME = "gateway.sock"
CONTAINER_DIR = "/run/props-gateway"  # where a container sees the socket's folder
MAX_REQUEST_BYTES = 8 * 1024 * 1024
MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_CONNECTIONS = 64  # requests in flight at once, over every run: past it, HTTP 503
# Refusals a run can repeat at will: the first of each is recorded, the rest counted (a run
# past its budget calling in a loop must not write an event a call).
REFUSALS = frozenset({"over_budget", "rate_limited", "not_granted", "refused"})


@dataclasses.dataclass
class RunPass:
    """What the gateway knows of one run it serves."""

    run_id: uuid.UUID
    model: str
    endpoint: catalog.EndpointRegistered | None
    budget_usd: float
    spent_usd: float = 0.0
    lock: anyio.Lock = dataclasses.field(default_factory=anyio.Lock)
    refused: dict[str, int] = dataclasses.field(default_factory=dict)  # outcome -> calls


class Gateway:
    """One launcher's gateway: its socket under `directory`, the runs it serves."""

    def __init__(self, store: EventStore, directory: Path, launcher: str) -> None:
        self.store = store
        self.directory = directory
        # Mounted into containers: the socket alone. One a launcher (launchers may share a
        # folder), and short: a Unix socket's path has at most 107 bytes.
        self.socket_dir = directory / f"socket-{launcher}"
        if len(str(self.socket_path)) > 100:
            digest = hashlib.sha256(str(self.socket_dir).encode()).hexdigest()[:16]
            self.socket_dir = Path(tempfile.gettempdir()) / f"props-gateway-{digest}"
            _own_folder(self.socket_dir)
        self._secret = self._load_secret(directory / "secret")
        self._passes: dict[uuid.UUID, RunPass] = {}
        self._calls: dict[str, deque[float]] = {}  # endpoint -> recent call times
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(120, connect=10))

    @staticmethod
    def _load_secret(path: Path) -> bytes:
        """The HMAC secret, kept across restarts (a restarted launcher adopts running
        containers, whose credentials must still hold), readable by the launcher only."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            pass
        secret = secrets.token_bytes(32)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another launcher on this folder made it first
            return path.read_bytes()
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
        return secret

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / SOCKET_NAME

    def credential(self, run_id: uuid.UUID) -> str:
        mac = hmac.new(self._secret, str(run_id).encode(), hashlib.sha256).hexdigest()
        return f"{run_id}.{mac}"

    def _pass_of(self, authorization: str | None) -> RunPass | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        token = authorization.removeprefix("Bearer ").strip()
        run, _, _mac = token.partition(".")
        try:
            run_id = uuid.UUID(run)
        except ValueError:
            return None
        if not hmac.compare_digest(token, self.credential(run_id)):
            return None
        return self._passes.get(run_id)

    # -- the runs it serves -------------------------------------------------------------------

    async def admit(self, run_id: uuid.UUID, model: str,
                    definition: catalog.DefinitionPushed, budget_usd: float) -> str:
        """Let the run call its granted endpoint (if it names one) until `retire`; its
        credential. Calls recorded before (a restarted launcher) count against its budget."""
        endpoint = None
        named = endpoints.endpoint_named(definition.config)
        granted = await endpoints.grant_of(self.store, definition.agent_type,
                                           definition.digest)
        if named is not None and granted is not None and named in granted.endpoints:
            endpoint = await endpoints.resolve(self.store, named)
        spent = sum(r.event.cost_usd for r in await self.store.read_stream(
            streams.gateway(run_id)) if isinstance(r.event, catalog.GatewayCalled))
        self._passes[run_id] = RunPass(run_id, model, endpoint, budget_usd, spent)
        return self.credential(run_id)

    def retire(self, run_id: uuid.UUID) -> None:
        """The run has ended: its credential no longer opens anything."""
        self._passes.pop(run_id, None)

    # -- serving ------------------------------------------------------------------------------

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]
                    = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve on the Unix socket until cancelled."""
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.chmod(0o755)
        self.socket_path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.socket_path))
        # Any container user may connect: the credential, not the file, is the gate.
        self.socket_path.chmod(0o666)
        sock.listen(256)
        try:
            await http_hosting.serve(self.app(), sock, limit_concurrency=MAX_CONNECTIONS,
                                     task_status=task_status)
        finally:
            sock.close()
            with stopping.shield("the model gateway's client: its close", at_most=5):
                await self._client.aclose()

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        run = self._pass_of(request.headers.get("authorization"))
        if run is None:
            return _error(401, "no run of this gateway holds that credential (it ends with "
                               "its run)")
        # One call at a time per run, its body read inside: its budget is checked, then
        # spent, and a run holds at most one body in the gateway's memory.
        async with run.lock:
            body = await _bounded_json(request)
            if body is None:
                return _error(400, f"the request is not a JSON object of at most "
                                   f"{MAX_REQUEST_BYTES // (1024 * 1024)} MiB")
            return await self._forward(run, body)

    async def _forward(self, run: RunPass, body: dict[str, Any]) -> Response:
        endpoint = run.endpoint
        if endpoint is None:
            await self._record(run, None, "not_granted", 403)
            return _error(403, "the run's definition names no endpoint the operator granted "
                               "it (props endpoints list; props definitions grant)")
        if run.budget_usd > 0 and run.spent_usd >= run.budget_usd:
            await self._record(run, endpoint.name, "over_budget", 402)
            return _error(402, f"the run's budget (${run.budget_usd:g}) is spent",
                          outcome="over_budget")
        if not self._within_rate(endpoint):
            await self._record(run, endpoint.name, "rate_limited", 429)
            return _error(429, f"endpoint {endpoint.name} is at its rate "
                               f"({endpoint.requests_per_minute} a minute)",
                          headers={"Retry-After": "5"})
        key = os.environ.get(endpoint.key_env, "") if endpoint.key_env else ""
        if endpoint.key_env and not key:
            await self._record(run, endpoint.name, "refused", 424)
            return _error(424, f"the gateway has no key for endpoint {endpoint.name} (the "
                               f"operator sets {endpoint.key_env} in the launcher's "
                               f"environment)")
        return await self._upstream(run, endpoint, forwarded(body, run.model, endpoint), key)

    async def _upstream(self, run: RunPass, endpoint: catalog.EndpointRegistered,
                        body: dict[str, Any], key: str) -> Response:
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        started = time.monotonic()
        try:
            answer = await self._client.post(
                endpoint.base_url.rstrip("/") + "/chat/completions", headers=headers,
                content=orjson.dumps(body), timeout=endpoint.timeout_seconds)
        except httpx.TimeoutException:
            await self._record(run, endpoint.name, "timeout", 504, started=started)
            return _error(504, f"endpoint {endpoint.name} did not answer in time",
                          outcome="timeout")
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            await self._record(run, endpoint.name, "reset", 502, started=started)
            return _error(502, f"endpoint {endpoint.name} dropped the connection mid-answer",
                          outcome="reset")
        except httpx.HTTPError:  # the class only: a message could echo the URL
            await self._record(run, endpoint.name, "unreachable", 502, started=started)
            return _error(502, f"endpoint {endpoint.name} cannot be reached",
                          outcome="unreachable")
        content = answer.content[:MAX_ANSWER_BYTES]
        parsed = _json_object(content) if answer.status_code < 400 else None
        # An answer that says no usage is charged as if it used all it was allowed.
        tokens_in, tokens_out = _usage(parsed) or (_estimated_tokens(body["messages"]),
                                                   body["max_tokens"])
        cost = (tokens_in * endpoint.price_in_per_mtok
                + tokens_out * endpoint.price_out_per_mtok) / 1e6
        run.spent_usd += cost
        await self._record(run, endpoint.name,
                           "answered" if answer.status_code < 400 else "upstream_error",
                           answer.status_code, tokens_in, tokens_out, cost, started)
        if parsed is not None:  # the charge, for the run's own account of its spend
            content = orjson.dumps({**parsed, chat.GATEWAY_COST: cost})
        if key:  # an upstream may echo the key (an error saying which key it refused);
            # scrubbed last, on the very bytes that go out (JSON escapes undone by then)
            content = content.replace(key.encode(), b"[key withheld by the gateway]")
        out = {}
        if (after := answer.headers.get("retry-after", "")) and after.isdigit():
            out["Retry-After"] = after
        return Response(content, status_code=answer.status_code, headers=out,
                        media_type="application/json")

    def _within_rate(self, endpoint: catalog.EndpointRegistered) -> bool:
        if endpoint.requests_per_minute is None:
            return True
        now = time.monotonic()
        recent = self._calls.setdefault(endpoint.name, deque())
        while recent and recent[0] < now - 60:
            recent.popleft()
        if len(recent) >= endpoint.requests_per_minute:
            return False
        recent.append(now)
        return True

    async def _record(self, run: RunPass, endpoint: str | None,
                      outcome: catalog.GatewayOutcome, status: int | None,
                      tokens_in: int = 0, tokens_out: int = 0, cost: float = 0.0,
                      started: float | None = None) -> None:
        if outcome in REFUSALS:  # refused again and again: recorded once, counted here
            run.refused[outcome] = run.refused.get(outcome, 0) + 1
            if run.refused[outcome] > 1:
                return
        latency = 0.0 if started is None else (time.monotonic() - started) * 1000
        event = catalog.GatewayCalled(
            run_id=run.run_id, endpoint=endpoint, outcome=outcome, http_status=status,
            tokens_in=min(tokens_in, 10**9), tokens_out=min(tokens_out, 10**9),
            cost_usd=min(cost, 1e6), latency_ms=min(latency, 1e8))
        await self.store.append(streams.gateway(run.run_id),
                                [NewEvent(event, uuid.uuid4(), {"actor": "gateway"})])


async def _bounded_json(request: Request) -> dict[str, Any] | None:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_REQUEST_BYTES:
            return None
    try:
        data = orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _own_folder(path: Path) -> None:
    """`path`, a folder of this user's own: made now, or refused if another user (or a link)
    took its predictable name first in the shared temporary folder."""
    try:
        path.mkdir(mode=0o755)
    except FileExistsError:
        found = path.lstat()
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            raise errors.PropsError(f"{path} is not a folder of this user's (another user "
                                    f"or a link took its name): remove it, or give props a "
                                    f"shorter PROPS_HOME") from None


def _json_object(content: bytes) -> dict[str, Any] | None:
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _usage(answer: dict[str, Any] | None) -> tuple[int, int] | None:
    """The answer's usage; None when it says none that can be read."""
    usage = answer.get("usage") if answer is not None else None
    if not isinstance(usage, dict):
        return None
    tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if type(tokens_in) is not int or type(tokens_out) is not int \
            or not (0 <= tokens_in <= 10**9 and 0 <= tokens_out <= 10**9):
        return None
    return tokens_in, tokens_out


# What of a run's request goes on to the endpoint: OpenAI's chat completion fields that ask
# for an answer, and nothing that routes it elsewhere (`models`, `api_base`), multiplies it
# (`n`) or streams it. The model is the run's; the answer's tokens are capped.
FORWARDED_FIELDS = frozenset({
    "messages", "temperature", "top_p", "max_tokens", "response_format", "tools",
    "tool_choice", "parallel_tool_calls", "seed", "stop", "presence_penalty",
    "frequency_penalty", "logit_bias", "user"})
DEFAULT_MAX_TOKENS = 4096  # an answer's cap when neither the run nor the endpoint sets one


def forwarded(body: dict[str, Any], model: str,
              endpoint: catalog.EndpointRegistered) -> dict[str, Any]:
    """The request the endpoint gets for a run's `body`."""
    out = {k: v for k, v in body.items() if k in FORWARDED_FIELDS}
    cap = endpoint.max_tokens or DEFAULT_MAX_TOKENS
    asked = body.get("max_tokens", body.get("max_completion_tokens"))
    out["max_tokens"] = min(asked, cap) if type(asked) is int and asked > 0 else cap
    out["model"], out["stream"], out["n"] = model, False, 1
    if not isinstance(out.get("messages"), list):
        out["messages"] = []
    return out


def _estimated_tokens(messages: list[Any]) -> int:
    """A cautious count of a request's prompt tokens (2.5 bytes a token)."""
    return int(len(orjson.dumps(messages)) / 2.5) + 1


def _error(status: int, message: str, headers: dict[str, str] | None = None,
           outcome: str | None = None) -> Response:
    headers = dict(headers or {})
    if outcome is not None:
        headers[chat.GATEWAY_OUTCOME] = outcome
    return Response(orjson.dumps({"error": {"message": message, "type": "props_gateway"}}),
                    status_code=status, headers=headers, media_type="application/json")

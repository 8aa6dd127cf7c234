"""What the API refuses before any route sees a request: bodies over the limit (413), and
input PostgreSQL cannot store or JSON should not hold (422): NUL characters and lone
surrogates in the query or the body, NaN and Infinity, integers past 64 bits.

One ASGI middleware at the edge, so no route can forget it; the body is read once here,
checked, and handed on as it came. Error bodies quote at most a short excerpt of the input.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_BODY_BYTES = 1024 * 1024
EXCERPT = 80  # characters of the input an error body quotes, at most
_INT64 = 2**63
# The schema's word for what check_text enforces, on every string a route declares: a
# client reading the OpenAPI document knows a NUL is refused before it sends one.
STORABLE_TEXT = r"^[^\x00]*$"


class Refused(ValueError):
    pass


def excerpt(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."


def check_text(text: str, where: str) -> None:
    if "\x00" in text:
        raise Refused(f"{where} holds a NUL character, which PostgreSQL cannot store")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(f"{where} holds a lone surrogate (not UTF-8)") from None


def _no_constant(name: str) -> Any:
    raise Refused(f"the body holds {name}, which is not a number JSON may carry")


def _walk(value: Any, where: str) -> None:
    if isinstance(value, str):
        check_text(value, where)
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise Refused(f"{where} is an integer out of range")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where)
            _walk(item, f"{where}.{excerpt(key)}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _walk(item, f"{where}[{n}]")


MAX_DEPTH = 64  # arrays and objects nested in a body, at most
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting(body: bytes) -> int:
    """How deep `body`'s arrays and objects nest, counted without parsing it (a parser
    that recurses, as the standard library's and the routes' do, fails on 100,000)."""
    brackets = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for b in brackets:
        depth += 1 if b in b"[{" else -1
        deepest = max(deepest, depth)
    return deepest


def check_body(body: bytes) -> None:
    if nesting(body) > MAX_DEPTH:
        raise Refused(f"the body nests arrays or objects more than {MAX_DEPTH} deep")
    try:
        doc = json.loads(body, parse_constant=_no_constant)
    except Refused:
        raise
    except ValueError:
        return  # not JSON: the route's own parser says so, in its own words
    _walk(doc, "body")


def check_query(raw: bytes) -> None:
    for part in raw.split(b"&"):
        decoded = unquote_to_bytes(part.replace(b"+", b" "))
        try:
            check_text(decoded.decode("utf-8"), "the query")
        except UnicodeDecodeError:
            raise Refused("the query is not UTF-8") from None


def _refusal(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": ["request"], "msg": message,
                                     "type": "value_error"}]}, status_code=status)


class InputLimits:
    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            check_query(scope.get("query_string", b""))
            check_text(scope["path"], "the path")
        except Refused as exc:
            await _refusal(422, str(exc))(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body_bytes:
                await self._too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body:
            try:
                check_body(body)
            except Refused as exc:
                await _refusal(422, str(exc))(scope, receive, send)
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _refusal(413, f"the body is over the limit of {self.max_body_bytes:,} bytes")(
            scope, receive, send)

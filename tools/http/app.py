"""The one HTTP app `props serve --http` and `props view` serve: the JSON API
(props.tools.http.api) and the analysts' viewer (props.tools.http.viewer) side by side, each
answering its own errors (JSON for the API, pages for the viewer), behind the limits and the
access log every request shares. Neither half imports the other: this module puts them
together."""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from props.core.domain.quotas import Quotas
from props.core.log.store import EventStore
from props.tools.http import limits
from props.tools.http.api import app as api
from props.tools.http.viewer import app as viewer

log = logging.getLogger("props.http")


def create_app(store: EventStore, quotas: Quotas | None = None) -> FastAPI:
    app = FastAPI(title="props", version="1", openapi_url=None, docs_url=None,
                  redoc_url=None, description=api.__doc__, responses=api.EVERY_ROUTE)
    app.state.store = store
    app.state.quotas = quotas or Quotas()  # each token's share (the settings' quota_*)
    pages, answers = viewer.errors_as_pages(), api.errors_as_json()
    for kind in {**answers, **pages}:
        app.add_exception_handler(kind, _either(pages.get(kind), answers.get(kind)))
    app.add_middleware(limits.InputLimits)
    app.add_middleware(AccessLog)
    api.install(app)
    viewer.install(app)
    return app


def _either(page: api.Handler | None, answer: api.Handler | None) -> api.Handler:
    """An error on one of the viewer's paths is a page (where the viewer has one for it),
    anywhere else the API's answer."""
    async def handle(request: Request, exc: Exception) -> Response:
        if page is not None and (answer is None or viewer.is_page(request.url.path)):
            return await page(request, exc)
        assert answer is not None
        return await answer(request, exc)
    return handle


class AccessLog:
    """One log line per request: method, path, status, milliseconds and the token's name
    (never its value: logs are read by more people than tokens are). Plain ASGI: Starlette's
    BaseHTTPMiddleware costs a task and a stream per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method, path = scope["method"], scope["path"]
            # A failure of props' own is an error in every log; the rest is the access log
            # (`props serve` keeps it, `props view` does not: see tools.logs).
            log.log(logging.ERROR if status >= 500 else logging.INFO, "%s %s %d", method,
                    path, status, extra={
                "method": method, "path": path, "status": status,
                "ms": round(1000 * (time.perf_counter() - started), 2),
                "token": scope.get("state", {}).get("token_name")})

"""The JSON API (request critic runs, read runs, scores and the service's health) and the
analysts' web viewer (props.tools.viewer), in one app.

Requests become events (through the same code as `props runs request`); reads come from the
projections (the read models in props.projections, which the CLI reads too), and a run's
timeline from its stream in the log. The API never writes a projection. Every route needs a
token with the route's scope; `/openapi.json` describes them. One router per area
(`routes/`); this module puts them together with the answers every route shares (errors,
limits, the access log).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pydantic
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from props.core.domain import run_requests
from props.core.log import database, errors
from props.core.log.store import EventStore
from props.tools.api import limits
from props.tools.api.auth import Denied
from props.tools.api.dependencies import Read
from props.tools.api.routes import evaluations, health, runs, scores
from props.tools.viewer import app as viewer

log = logging.getLogger("props.http")


def _field_error(where: str, field: str, message: str, status: int) -> JSONResponse:
    # The shape FastAPI gives its own validation errors, so clients parse one format.
    return JSONResponse({"detail": [{"loc": [where, field], "msg": message,
                                     "type": "value_error"}]}, status_code=status)


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


class Problem(pydantic.BaseModel):
    """Every refusal's body: a sentence, or FastAPI's list of fields with what is wrong."""

    detail: str | list[dict[str, Any]]


def _declared(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": Problem, "description": ANSWERS[status]} for status in statuses}


# Every status a route can answer besides its success, declared once so the OpenAPI
# document is the truth (schemathesis checks it against the running server in CI).
ANSWERS = {
    400: "the request cannot be carried out as asked (the sentence says why)",
    401: "no token, or a token that is unknown or revoked",
    403: "the token lacks the route's scope",
    404: "something the request names is not here (a run, a definition, a snapshot, a "
         "scorer, a page cursor)",
    413: "the body is over the limit",
    422: "a field is not valid (its location and the reason)",
    503: "the database is unavailable or the projections are not built yet; retry "
         "(Retry-After)",
}
EVERY_ROUTE = _declared(400, 401, 403, 404, 413, 422, 503)


def create_app(store: EventStore) -> FastAPI:
    app = FastAPI(title="props", version="1", openapi_url=None, docs_url=None,
                  redoc_url=None, description=__doc__, responses=EVERY_ROUTE)

    app.state.store = store

    @app.exception_handler(Denied)
    async def denied(request: Request, exc: Denied) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer realm="props"'} if exc.status == 401 else {}
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def unprocessable(request: Request, exc: RequestValidationError) -> Response:
        if (shown := await viewer.page_error(request, exc)) is not None:
            return shown
        # FastAPI quotes the whole input of each error: a 20 MB body came back whole.
        found = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                  "type": e.get("type", "value_error"),
                  **({"input": limits.excerpt(e["input"])} if "input" in e else {})}
                 for e in exc.errors()[:20]]
        return JSONResponse({"detail": found}, status_code=422)

    @app.exception_handler(run_requests.InvalidRequest)
    async def invalid(request: Request, exc: run_requests.InvalidRequest) -> JSONResponse:
        # A name the request gives that is not here: 404, with the field it came in.
        where = "query" if exc.field in ("cursor", "scorer") else "body"
        return _field_error(where, exc.field, str(exc), status=404)

    @app.exception_handler(errors.PropsError)
    async def props_error(request: Request, exc: errors.PropsError) -> Response:
        if (shown := await viewer.page_error(request, exc)) is not None:
            return shown
        if isinstance(exc, errors.NotBuilt):
            # A new database: the service's projection runner builds the tables at its
            # start, while the API already answers.
            return JSONResponse({"detail": "the projections are not built yet (the service "
                                 "builds them as it starts); retry"},
                                status_code=503, headers={"Retry-After": "1"})
        if isinstance(exc, errors.StoreUnavailable | errors.SchemaError):
            return JSONResponse({"detail": str(exc)}, status_code=503,
                                headers={"Retry-After": "1"})
        named_nothing = isinstance(exc, errors.NotFound | errors.UnknownScorer)
        return JSONResponse({"detail": str(exc)}, status_code=404 if named_nothing else 400)


    for kind in database.CONNECTION_ERRORS:
        if not issubclass(kind, Exception):
            continue

        @app.exception_handler(kind)
        async def database_down(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"detail": f"the database is unavailable ({exc}); retry"},
                                status_code=503, headers={"Retry-After": "1"})

    app.add_middleware(limits.InputLimits)
    app.add_middleware(AccessLog)

    @app.get("/openapi.json", include_in_schema=False,
             dependencies=Read)
    async def openapi() -> dict[str, Any]:
        return app.openapi()

    for area in (health, runs, evaluations, scores):
        app.include_router(area.router)
    viewer.install(app)
    return app

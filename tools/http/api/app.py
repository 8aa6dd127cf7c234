"""The JSON API: request critic runs and evaluations, read runs, scores and the service's
health; its routers and its errors, which are JSON (props.tools.http.app puts it beside the
viewer in one app).

Requests become events (through the same code as `props runs request`); reads come from the
projections (the read models in props.projections, which the CLI reads too), and a run's
timeline from its stream in the log. The API never writes a projection. Every route needs a
token with the route's scope; `/openapi.json` describes them. One router per area
(`routes/`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from props.core.domain import quotas, run_requests
from props.core.log import database, errors
from props.tools.http import limits
from props.tools.http.api.routes import evaluations, health, runs, scores
from props.tools.http.auth import Denied
from props.tools.http.dependencies import Problem, Read

Handler = Callable[[Request, Exception], Awaitable[Response]]


def _field_error(where: str, field: str, message: str, status: int) -> JSONResponse:
    # The shape FastAPI gives its own validation errors, so clients parse one format.
    return JSONResponse({"detail": [{"loc": [where, field], "msg": message,
                                     "type": "value_error"}]}, status_code=status)


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
    429: "the token is over one of its quotas (runs in flight, cases queued, evaluations "
         "open): nothing was written; retry once its runs finish (Retry-After)",
    503: "the database is unavailable or the projections are not built yet; retry "
         "(Retry-After)",
}
EVERY_ROUTE = _declared(400, 401, 403, 404, 413, 422, 503)


def install(app: FastAPI) -> None:
    """Add the API's routes, and its description as a document, to the app."""
    @app.get("/openapi.json", include_in_schema=False, dependencies=Read)
    async def openapi() -> dict[str, Any]:
        return app.openapi()

    for area in (health, runs, evaluations, scores):
        app.include_router(area.router)


async def _denied(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Denied)
    headers = {"WWW-Authenticate": 'Bearer realm="props"'} if exc.status == 401 else {}
    return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=headers)


async def _unprocessable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    # FastAPI quotes the whole input of each error: a 20 MB body came back whole.
    found = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
              "type": e.get("type", "value_error"),
              **({"input": limits.excerpt(e["input"])} if "input" in e else {})}
             for e in exc.errors()[:20]]
    return JSONResponse({"detail": found}, status_code=422)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, run_requests.InvalidRequest)
    # A name the request gives that is not here: 404, with the field it came in.
    where = "query" if exc.field in ("cursor", "scorer") else "body"
    return _field_error(where, exc.field, str(exc), status=404)


async def _props_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, errors.NotBuilt):
        # A new database: the service's projection runner builds the tables at its
        # start, while the API already answers.
        return JSONResponse({"detail": "the projections are not built yet (the service "
                             "builds them as it starts); retry"},
                            status_code=503, headers={"Retry-After": "1"})
    if isinstance(exc, quotas.OverQuota):
        return JSONResponse({"detail": str(exc)}, status_code=429,
                            headers={"Retry-After": "30"})
    if isinstance(exc, errors.StoreUnavailable | errors.SchemaError):
        return JSONResponse({"detail": str(exc)}, status_code=503,
                            headers={"Retry-After": "1"})
    named_nothing = isinstance(exc, errors.NotFound | errors.UnknownScorer)
    return JSONResponse({"detail": str(exc)}, status_code=404 if named_nothing else 400)


async def _database_down(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": f"the database is unavailable ({exc}); retry"},
                        status_code=503, headers={"Retry-After": "1"})


def errors_as_json() -> dict[type[Exception], Handler]:
    """How the API answers each error it knows, by the error's class."""
    found: dict[type[Exception], Handler] = {
        Denied: _denied, RequestValidationError: _unprocessable,
        run_requests.InvalidRequest: _invalid, errors.PropsError: _props_error}
    for kind in database.CONNECTION_ERRORS:
        if issubclass(kind, Exception):
            found[kind] = _database_down
    return found

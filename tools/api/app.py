"""The JSON API: request critic runs, read runs, scores and the service's health.

Requests become events (through the same code as `props runs request`); reads come from the
projections, and a run's timeline from its stream in the log. The API never writes a
projection. Every route needs a token with the route's scope; `/openapi.json` describes them.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import anyio
import asyncpg
import pydantic
from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from props.core.domain import run_requests, streams, tokens
from props.core.log import database, errors
from props.core.log.events import details
from props.core.log.store import EventStore
from props.projections import engine, figures
from props.reactors import host
from props.tools.api import limits
from props.tools.api.auth import Denied, authorize

log = logging.getLogger("props.http")
_bearer = HTTPBearer(auto_error=False, description="a props token (props tokens create)")
RunStatus = Literal["requested", "running", "completed", "failed", "timed_out",
                    "budget_exceeded", "cancelled"]


class CriticRunBody(pydantic.BaseModel):
    """Critic runs of one definition on one example with one model."""

    model_config = pydantic.ConfigDict(extra="forbid")
    definition: str = pydantic.Field(min_length=1, max_length=200,
                                     description="the critic definition's name")
    ref: str = pydantic.Field("latest", min_length=1, max_length=200,
                              description="`latest`, a tag, or a digest `sha256:...`; "
                              "resolved to a digest now, at request time")
    snapshot: str = pydantic.Field(min_length=1, max_length=200,
                                   description="snapshot slug, e.g. csvtool/2025-09-03-00")
    file_set: str | None = pydantic.Field(None, max_length=200,
                                          description="review only this file set")
    model: str = pydantic.Field(min_length=1, max_length=200)
    timeout_seconds: float = pydantic.Field(600, gt=0, le=86_400)
    budget_usd: float = pydantic.Field(1.0, ge=0, le=10_000)
    count: int = pydantic.Field(1, ge=1, le=100, description="how many runs")


class Requested(pydantic.BaseModel):
    run_ids: list[uuid.UUID]
    digest: str = pydantic.Field(description="the definition digest the runs will use")
    already_requested: bool = pydantic.Field(
        description="true when this Idempotency-Key was seen: the same runs, nothing new")


class TimelineEntry(pydantic.BaseModel):
    version: int
    type: str
    at: dt.datetime
    data: dict[str, Any]


class Run(pydantic.BaseModel):
    run_id: uuid.UUID
    status: RunStatus
    projected: bool = pydantic.Field(description="false while the projections have not "
                                     "caught up with this run yet (status from the log)")
    details: dict[str, Any] = pydantic.Field(description="the run's row in agent_runs")
    timeline: list[TimelineEntry] | None = None


class RunPage(pydantic.BaseModel):
    runs: list[dict[str, Any]]
    next: str | None = pydantic.Field(description="pass as `cursor` for the next page")


class Scores(pydantic.BaseModel):
    scores: list[dict[str, Any]]
    evidence: dict[str, Any] = pydantic.Field(
        description="every critic run in one state under `states_scorer` (scored, "
        "unfinished, not completed, no issues, ungraded, unscorable: they add up to "
        "critic_runs), the scored runs from imported files, the interval method, and the "
        "paired differences between rows of one scorer")


class Liveness(pydantic.BaseModel):
    status: Literal["ok", "unavailable"]


class Health(pydantic.BaseModel):
    status: Literal["ok", "degraded"]
    database: str
    reactors: list[dict[str, Any]]
    projections: list[dict[str, Any]]


_RUNS = """
SELECT * FROM projections.agent_runs
 WHERE agent_type = $1 AND ($2::text IS NULL OR status = $2)
   AND ($3::text IS NULL OR model = $3) AND ($4::text IS NULL OR definition = $4)
   AND ($5::text IS NULL OR snapshot = $5)
   AND ($6::timestamptz IS NULL OR (requested_at, run_id) < ($6, $7::uuid))
 ORDER BY requested_at DESC, run_id DESC LIMIT $8
"""


def _cursor(row: Any) -> str:
    return base64.urlsafe_b64encode(
        f"{row['requested_at'].isoformat()}|{row['run_id']}".encode()).decode()


def _after(cursor: str | None) -> tuple[dt.datetime | None, uuid.UUID | None]:
    if not cursor:
        return None, None
    try:
        at, _, run_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return dt.datetime.fromisoformat(at), uuid.UUID(run_id)
    except ValueError:
        raise run_requests.InvalidRequest("cursor", "not a cursor this API gave out") from None


def _field_error(where: str, field: str, message: str) -> JSONResponse:
    # The shape FastAPI gives its own validation errors, so clients parse one format.
    return JSONResponse({"detail": [{"loc": [where, field], "msg": message,
                                     "type": "value_error"}]}, status_code=422)


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
            log.info("%s %s %d", method, path, status, extra={
                "method": method, "path": path, "status": status,
                "ms": round(1000 * (time.perf_counter() - started), 2),
                "token": scope.get("state", {}).get("token_name")})


def scope(needed: tokens.Scope) -> Callable[..., Awaitable[tokens.Token]]:
    """A dependency: the request's token, which must allow `needed` (401/403 otherwise)."""
    async def check(request: Request, credentials: Annotated[
            HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> tokens.Token:
        store: EventStore = request.app.state.store
        token = await authorize(store, request.headers.get("authorization"), needed)
        request.state.token_name = token.name
        return token
    return check


# Module-level: FastAPI reads these annotations from the module's globals.
RequestToken = Annotated[tokens.Token, Depends(scope("request"))]
Read = [Depends(scope("read"))]


def create_app(store: EventStore) -> FastAPI:
    app = FastAPI(title="props", version="1", openapi_url=None, docs_url=None,
                  redoc_url=None, description=__doc__)

    app.state.store = store

    @app.exception_handler(Denied)
    async def denied(request: Request, exc: Denied) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer realm="props"'} if exc.status == 401 else {}
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def unprocessable(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI quotes the whole input of each error: a 20 MB body came back whole.
        found = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                  "type": e.get("type", "value_error"),
                  **({"input": limits.excerpt(e["input"])} if "input" in e else {})}
                 for e in exc.errors()[:20]]
        return JSONResponse({"detail": found}, status_code=422)

    @app.exception_handler(run_requests.InvalidRequest)
    async def invalid(request: Request, exc: run_requests.InvalidRequest) -> JSONResponse:
        where = "query" if exc.field in ("cursor", "scorer") else "body"
        return _field_error(where, exc.field, str(exc))

    @app.exception_handler(errors.PropsError)
    async def props_error(request: Request, exc: errors.PropsError) -> JSONResponse:
        if isinstance(exc, errors.StoreUnavailable | errors.SchemaError):
            return JSONResponse({"detail": str(exc)}, status_code=503,
                                headers={"Retry-After": "1"})
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(asyncpg.UndefinedTableError)
    async def not_built(request: Request, exc: Exception) -> JSONResponse:
        # A new database: the service's projection runner builds the tables at its start,
        # while the API already answers.
        return JSONResponse({"detail": "the projections are not built yet (the service "
                             "builds them as it starts); retry"},
                            status_code=503, headers={"Retry-After": "1"})

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

    @app.get("/health", response_model=Liveness,
             summary="200 `ok` while the database answers, else 503; no token needed (for "
                     "load balancers and container probes)")
    async def liveness() -> JSONResponse:
        try:
            with anyio.fail_after(5):
                await store.pool.fetchval("SELECT 1")
        except Exception:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/api/health", response_model=Health, dependencies=Read,
             summary="database, reactors and projections: reachable, and how far behind")
    async def health() -> Health:
        await store.pool.fetchval("SELECT 1")
        reactors = [{"name": r.name, "lag_events": r.lag_events,
                     "lag_seconds": r.lag_seconds, "parked": r.parked}
                    for r in await host.status(store)]
        projections = [{"name": s.name, "lag_events": s.lag_events,
                        "lag_seconds": s.lag_seconds} for s in await engine.status(store)]
        stuck = any(r["parked"] for r in reactors)
        return Health(status="degraded" if stuck else "ok", database="ok",
                      reactors=reactors, projections=projections)

    @app.post("/api/runs/critic", status_code=202, response_model=Requested,
              summary="request critic runs (they become run.requested events)")
    async def request_critic(
        body: CriticRunBody, response: Response,
        token: RequestToken,
        idempotency_key: Annotated[str | None, Header(
            max_length=200, description="retrying with the same key returns the same runs"
        )] = None,
    ) -> Requested:
        done = await run_requests.request_critic_runs(store, run_requests.CriticRunRequest(
            **body.model_dump(), requested_by=f"api:{token.name}",
            idempotency_key=None if idempotency_key is None
            else f"{token.id}/{idempotency_key}"))
        if len(done.run_ids) == 1:
            response.headers["Location"] = f"/api/runs/{done.run_ids[0]}"
        return Requested(run_ids=done.run_ids, digest=done.digest,
                         already_requested=done.already_requested)

    @app.get("/api/runs/{run_id}", response_model=Run, dependencies=Read,
             summary="a run's status (projections) and timeline (its events in the log)")
    async def get_run(run_id: uuid.UUID,
                      timeline: bool = Query(True, description="include the timeline")) -> Run:
        records = await store.read_stream(streams.run(run_id))
        if not records:
            raise HTTPException(404, f"no run {run_id}")
        try:
            row = await store.pool.fetchrow(
                "SELECT * FROM projections.agent_runs WHERE run_id = $1", run_id)
        except asyncpg.UndefinedTableError:  # not built yet: the log has the run already
            row = None
        events = [TimelineEntry(version=r.stream_version, type=r.type_name, at=r.recorded_at,
                                data=details(r.event)) for r in records] if timeline else None
        if row is None:
            return Run(run_id=run_id, status="requested", projected=False, details={},
                       timeline=events)
        return Run(run_id=run_id, status=row["status"], projected=True, details=dict(row),
                   timeline=events)

    @app.get("/api/runs", response_model=RunPage, dependencies=Read,
             summary="runs, newest first, filtered and paginated")
    async def list_runs(
        status: RunStatus | None = None, model: str | None = None,
        definition: str | None = None, snapshot: str | None = None,
        agent_type: Literal["critic", "grader"] = "critic",
        limit: int = Query(50, ge=1, le=500), cursor: str | None = None,
    ) -> RunPage:
        at, after_id = _after(cursor)
        rows = await store.pool.fetch(_RUNS, agent_type, status, model, definition, snapshot,
                                      at, after_id, limit + 1)
        page = rows[:limit]
        return RunPage(runs=[dict(r) for r in page],
                       next=_cursor(page[-1]) if len(rows) > limit else None)

    @app.get("/api/scores", response_model=Scores, dependencies=Read,
             summary="recall and precision per model, definition and scorer")
    async def scores(scorer: str | None = Query(
            None, description="NAME or NAME@VERSION")) -> Scores:
        try:
            name, version = figures.scorer_filter(scorer)
        except errors.PropsError as exc:
            raise run_requests.InvalidRequest("scorer", str(exc)) from None
        records, evidence = await figures.load(store, name, version)
        return Scores(scores=records, evidence=evidence)

    return app

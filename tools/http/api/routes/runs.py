"""Runs: request critic runs, list runs, look at one."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from typing import Annotated, Any, Literal

import pydantic
from fastapi import APIRouter, Header, HTTPException, Query, Response
from fastapi.responses import JSONResponse

from props.core.domain import catalog, quotas, run_requests, streams, tokens
from props.core.log import errors
from props.core.log.events import details
from props.core.log.store import StoreTransaction
from props.projections import run_pages
from props.tools.http.dependencies import OVER_QUOTA, Quota, Read, RequestToken, RunNamed, Store
from props.tools.http.limits import STORABLE_TEXT

router = APIRouter()
Name = Annotated[str | None, Query(max_length=200, pattern=STORABLE_TEXT)]
RunStatus = catalog.RunStatus


class CriticRunBody(pydantic.BaseModel):
    """Critic runs of one definition on one example with one model."""

    model_config = pydantic.ConfigDict(extra="forbid")
    definition: str = pydantic.Field(min_length=1, max_length=200, pattern=STORABLE_TEXT,
                                     description="the critic definition's name")
    ref: str = pydantic.Field("latest", min_length=1, max_length=200,
                              pattern=STORABLE_TEXT,
                              description="`latest`, a tag, or a digest `sha256:...`; "
                              "resolved to a digest now, at request time")
    snapshot: str = pydantic.Field(min_length=1, max_length=200, pattern=STORABLE_TEXT,
                                   description="snapshot slug, e.g. csvtool/2025-09-03-00")
    file_set: str | None = pydantic.Field(None, max_length=200, pattern=STORABLE_TEXT,
                                          description="review only this file set")
    model: str = pydantic.Field(min_length=1, max_length=200, pattern=STORABLE_TEXT)
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
    scorer: str | None = pydantic.Field(description="the scorer the figures are under: the "
                                        "active one, else the first that graded the run")
    located_recall: float | None = pydantic.Field(
        description="of the defects in scope, the share an issue pointed at (located by the "
        "location rule: candidates, not confirmed finds; null: not scored, or the run did "
        "not complete)")
    partial: bool = pydantic.Field(default=False, description="the run ended not completed: "
                                   "its issues are what it reported before it stopped, and "
                                   "no figure counts them")
    chance: float | None = pydantic.Field(description="the recall the same issues would "
                                          "have by chance (null: not recorded)")
    precision: float | None = pydantic.Field(description="of the graded issues, the share "
                                             "that found a defect")
    timeline: list[TimelineEntry] | None = None


class RunPage(pydantic.BaseModel):
    runs: list[dict[str, Any]]
    next: str | None = pydantic.Field(description="pass as `cursor` for the next page")


def _cursor(after: run_pages.After) -> str:
    return base64.urlsafe_b64encode(
        f"{after.requested_at.isoformat()}|{after.run_id}".encode()).decode()


def _after(cursor: str | None) -> run_pages.After | None:
    if not cursor:
        return None
    try:
        at, _, run_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return run_pages.After(dt.datetime.fromisoformat(at), uuid.UUID(run_id))
    except ValueError:
        raise run_requests.InvalidRequest("cursor", "not a cursor this API gave out") from None


@router.post("/api/runs/critic", status_code=202, response_model=Requested,
             summary="request critic runs (they become run.requested events)",
             responses=OVER_QUOTA)
async def request_critic(
    store: Store, body: CriticRunBody, response: Response,
    token: RequestToken, quota: Quota,
    idempotency_key: Annotated[str | None, Header(
        max_length=200, pattern=STORABLE_TEXT,
        description="retrying with the same key returns the same runs"
    )] = None,
) -> Requested:
    requester = f"api:{token.name}"
    runs = await run_requests.prepare_critic_runs(store, run_requests.CriticRunRequest(
        **body.model_dump(), requested_by=requester,
        idempotency_key=None if idempotency_key is None else f"{token.id}/{idempotency_key}"))
    async with quotas.turn(store, requester) as tx:
        if idempotency_key is None or not await _seen(tx, token, idempotency_key):
            await quotas.check_runs(tx, quota, requester, body.count)
        done = await runs.append(tx)
    if len(done.run_ids) == 1:
        response.headers["Location"] = f"/api/runs/{done.run_ids[0]}"
    return Requested(run_ids=done.run_ids, digest=done.digest,
                     already_requested=done.already_requested)


async def _seen(tx: StoreTransaction, token: tokens.Token, idempotency_key: str) -> bool:
    """An idempotent retry asks for nothing new: no quota is taken twice. (Asked inside the
    requester's turn: a retry sent twice at once is seen by the second.)"""
    first = run_requests.idempotent_run_id(f"{token.id}/{idempotency_key}", 0)
    return await quotas.asked_before(tx, streams.run(first))


@router.get("/api/runs/critic", include_in_schema=False)
async def critic_runs_are_posted() -> JSONResponse:
    # Without it a GET here would be read as a run id ("critic") and answer 422.
    return JSONResponse({"detail": "critic runs are requested with POST"}, status_code=405,
                        headers={"Allow": "POST"})


@router.get("/api/runs/{run_id}", response_model=Run, dependencies=Read,
            summary="a run's status (projections), its scorer's recall, chance and precision of "
                    "it, and its timeline (its events in the log)")
async def get_run(store: Store, run_id: RunNamed,
                  timeline: bool = Query(True, description="include the timeline")) -> Run:
    try:
        shown = await run_pages.shown(store, run_id)
    except errors.NotFound:
        raise HTTPException(404, f"no run {run_id}") from None
    run = shown.detail
    events = [TimelineEntry(version=r.stream_version, type=r.type_name, at=r.recorded_at,
                            data=details(r.event)) for r in run.events] if timeline else None
    return Run(run_id=run_id, status=run.status, projected=run.row is not None,
               details=run.row or {}, timeline=events, partial=shown.header["partial"],
               **shown.figures)


@router.get("/api/runs", response_model=RunPage, dependencies=Read,
            summary="runs, newest first, filtered and paginated")
async def list_runs(
    store: Store,
    status: RunStatus | None = None, model: Name = None, definition: Name = None,
    snapshot: Name = None, agent_type: Literal["critic", "grader"] = "critic",
    limit: int = Query(50, ge=1, le=500),
    cursor: Annotated[str | None, Query(max_length=400, pattern=STORABLE_TEXT)] = None,
) -> RunPage:
    found = await run_pages.page(
        store, run_pages.RunFilter(agent_type, status, model, definition, snapshot), limit,
        _after(cursor))
    return RunPage(runs=found.rows, next=_cursor(found.next) if found.next else None)

"""Evaluations: record a plan and request its cases (as `props eval run --detach`), and see
where one stands (as `props eval show`). `props serve` does the work."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from props.core.domain import evaluation_starts, evaluations, quotas
from props.core.log import errors
from props.projections import evaluation_standing
from props.reactors import evaluation_driver as driver
from props.tools.http.dependencies import (
    OVER_QUOTA,
    Quota,
    Read,
    RequestToken,
    Store,
    refusal,
)
from props.tools.http.limits import STORABLE_TEXT

router = APIRouter()
EvaluationName = Annotated[str, Path(min_length=1, max_length=200, pattern=STORABLE_TEXT)]


class Started(pydantic.BaseModel):
    name: str
    version: int
    cases: int
    resumed: bool = pydantic.Field(description="the same plan was recorded already: only "
                                   "the cases without a result were requested")
    requested: int = pydantic.Field(description="runs requested by this call")


class Standing(pydantic.BaseModel):
    name: str
    version: int
    outcome: str = pydantic.Field(description="complete; else how it ended (incomplete, "
                                  "budget_exhausted, stopped_on_errors); else incomplete")
    ended: bool = pydantic.Field(description="its driving ended: a case with no result is "
                                 "missing then, no longer waiting or running")
    complete: bool = pydantic.Field(description="every case scored or excluded")
    scorer: str | None
    scorer_from: str = pydantic.Field(
        "active", description="active: this database's active scorer; origin: the scorer "
        "the origin of an imported evaluation had active (history here, never activated)")
    interval: str
    counts: dict[str, int] = pydantic.Field(description="cases by state: waiting, running, "
                                            "scored, failed, excluded, missing")
    done: int = pydantic.Field(description="cases scored or excluded (a failed case is not "
                               "done: running the plan again retries it)")
    cost_usd: float
    critics: list[dict[str, Any]]
    confirmed_by: list[str] = pydantic.Field(description="the judges and people that "
                                             "confirmed a find of its runs")
    reviewed_by: list[str] = pydantic.Field(description="the judges and people that "
                                            "graded any issue of its runs")
    cases: list[dict[str, Any]]


@router.post("/api/evaluations", status_code=202, response_model=Started,
             summary="record an evaluation's plan and request every case without a result",
             responses={403: refusal("the token lacks the request scope, or the "
                                     "evaluation's name was started by another token"),
                        409: refusal("a different plan is recorded under this name, or "
                                     "another request changed it meanwhile (retry)"),
                        **OVER_QUOTA})
async def start(store: Store, token: RequestToken, quota: Quota, plan: evaluations.Plan,
                new_version: bool = False) -> Started | JSONResponse:
    """The plan's first cases are requested now, within its `max_concurrency` and
    `budget_usd` and the token's runs-in-flight quota; `props serve` requests the rest as
    runs finish. Over the token's quotas (cases queued, evaluations open, or its runs in
    flight at their quota already) it answers 429 and records nothing; a name another token
    started, 403."""
    try:
        cases = await evaluations.resolve(store, plan)
    except evaluations.PlanNamesNothing as exc:
        return JSONResponse({"detail": str(exc)}, status_code=404)
    requester = f"api:{token.name}"
    try:
        starting = await evaluation_starts.prepare(store, plan, cases, new_version=new_version,
                                             requester=requester)
        async with quotas.turn(store, requester) as tx:
            room = await quotas.check_evaluation(tx, quota, requester, plan.name, len(cases),
                                                 supersedes=not starting.resumed)
            fresh = await evaluation_starts.record(tx, starting)
    except evaluations.NotYours as exc:
        return JSONResponse({"detail": str(exc)}, status_code=403)
    except (evaluations.PlanChanged, evaluations.BroughtByImport,
            errors.ConcurrencyConflict) as exc:
        return JSONResponse({"detail": str(exc)}, status_code=409)
    ev = starting.evaluation if fresh else await evaluation_starts.settled(store, starting)
    requested = await driver.request_detached(store, ev, most=room)
    return Started(name=ev.name, version=ev.version, cases=len(cases),
                   resumed=starting.resumed, requested=requested)


@router.get("/api/evaluations/{name}", response_model=Standing, dependencies=Read,
            summary="an evaluation's cases, where each stands, and its figures")
async def standing(store: Store, name: EvaluationName) -> Standing:
    """As `props eval show --format json`: both render one read model
    (props.projections.evaluation_standing)."""
    found = await evaluation_standing.named(store, name)  # NotFound: 404
    return Standing(**found.as_json())

"""Evaluations: each one's progress, spend and figures, and the cases that are not done."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse

from props.core.domain import evaluations
from props.core.scoring import intervals, registration
from props.projections import evaluation_scores
from props.reactors import evaluation_driver as driver
from props.tools.http.dependencies import Store
from props.tools.http.viewer import choices, plots
from props.tools.http.viewer.session import Viewer, needs
from props.tools.http.viewer.templating import page

router = APIRouter()
Reader = Annotated[Viewer, Depends(needs("read"))]
OPEN_SHOWN = 200  # the cases not done, listed on the page (the rest counted)


def _progress(states: list[evaluations.CaseState]) -> dict[str, Any]:
    n = Counter(s.state for s in states)
    return {"cases": len(states), "counts": dict(n), "cost_usd": sum(s.cost_usd for s in states),
            "done": n["scored"] + n["excluded"] + n["failed"],
            "complete": all(s.state in driver.DONE for s in states)}


@router.get("/evaluations", response_class=HTMLResponse, include_in_schema=False)
async def evaluations_page(request: Request, store: Store, viewer: Reader) -> HTMLResponse:
    scorer = await registration.active_scorer(store)
    rows = []
    for name in (await choices.load(store)).evaluations:
        ev = await evaluations.recorded(store, name)
        rows.append({"name": name, "version": ev.version, "budget": ev.plan.budget_usd,
                     **_progress(await driver.case_states(store, ev, scorer))})
    return page(request, "evaluations.html", rows=rows)


@router.get("/evaluations/{name}", response_class=HTMLResponse, include_in_schema=False)
async def evaluation_page(request: Request, store: Store, viewer: Reader,
                          name: Annotated[str, Path(max_length=200)]) -> HTMLResponse:
    ev = await evaluations.recorded(store, name)  # NotFound: 404
    scorer = await registration.active_scorer(store)
    states = await driver.case_states(store, ev, scorer)
    critics = evaluation_scores.critic_rows(await evaluation_scores.scored(store, states,
                                                                           scorer))
    for row in critics:
        for measure in ("recall", "precision"):
            row[f"{measure}_plot"] = plots.interval(measure, row[measure],
                                                    row[f"{measure}_low"],
                                                    row[f"{measure}_high"])
    open_cases = [s for s in states if s.state not in driver.DONE]
    return page(request, "evaluation.html", ev=ev, scorer=scorer, critics=critics,
                progress=_progress(states), open_cases=open_cases[:OPEN_SHOWN],
                open_left=max(0, len(open_cases) - OPEN_SHOWN), method=intervals.METHOD,
                bar_width=plots.BAR_WIDTH)

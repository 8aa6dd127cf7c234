"""Evaluations: each one's progress, spend and figures, and the cases that are not done."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse

from props.core.scoring import intervals
from props.projections import evaluation_standing, filter_choices
from props.tools.http.dependencies import Store
from props.tools.http.viewer import plots
from props.tools.http.viewer.session import Viewer, needs
from props.tools.http.viewer.templating import page

router = APIRouter()
Reader = Annotated[Viewer, Depends(needs("read"))]
OPEN_SHOWN = 200  # the cases not done, listed on the page (the rest counted)


def _progress(standing: evaluation_standing.Standing) -> dict[str, Any]:
    n = standing.counts
    return {"cases": len(standing.states), "counts": n, "cost_usd": standing.cost_usd,
            "done": standing.done,
            "complete": standing.complete, "outcome": standing.outcome,
            "ended": standing.ended is not None}


@router.get("/evaluations", response_class=HTMLResponse, include_in_schema=False)
async def evaluations_page(request: Request, store: Store, viewer: Reader) -> HTMLResponse:
    rows = []
    for name in (await filter_choices.load(store)).evaluations:
        standing = await evaluation_standing.named(store, name, figures=False)
        rows.append({"name": name, "version": standing.ev.version,
                     "budget": standing.ev.plan.budget_usd, **_progress(standing)})
    return page(request, "evaluations.html", rows=rows)


@router.get("/evaluations/{name}", response_class=HTMLResponse, include_in_schema=False)
async def evaluation_page(request: Request, store: Store, viewer: Reader,
                          name: Annotated[str, Path(max_length=200)]) -> HTMLResponse:
    standing = await evaluation_standing.named(store, name)  # NotFound: 404
    critics = standing.critics
    for row in critics:
        for measure in ("located_recall", "precision"):
            row[f"{measure}_plot"] = plots.interval(measure, row[measure],
                                                    row[f"{measure}_low"],
                                                    row[f"{measure}_high"])
    open_cases = standing.open_cases
    return page(request, "evaluation.html", ev=standing.ev, scorer=standing.scorer,
                critics=critics, progress=_progress(standing),
                open_cases=open_cases[:OPEN_SHOWN],
                open_left=max(0, len(open_cases) - OPEN_SHOWN), method=intervals.METHOD,
                bar_width=plots.BAR_WIDTH,
                confirmed_by=standing.found.judges if standing.found else [])

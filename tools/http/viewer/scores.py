"""Scores per model, definition and scorer, with their intervals plotted, per snapshot and
over time; and the comparison of two scorers, or of the models under one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from props.core.scoring import comparison, intervals, rescoring
from props.projections import evaluation_standing, figures, filter_choices
from props.tools.http.dependencies import Store
from props.tools.http.viewer import plots
from props.tools.http.viewer.session import Viewer, needs
from props.tools.http.viewer.templating import page

router = APIRouter()
Reader = Annotated[Viewer, Depends(needs("read"))]
Text = Annotated[str | None, Query(max_length=200)]


def _plotted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**row, "located_plot": plots.interval("located recall", row["located_recall"],
                                                   row["located_recall_low"],
                                                   row["located_recall_high"]),
             "above_chance_plot": plots.interval("above chance", row["above_chance"],
                                                 row["above_chance_low"],
                                                 row["above_chance_high"]),
             "precision_plot": plots.interval("precision", row["precision"],
                                              row["precision_low"], row["precision_high"])}
            for row in rows]


@router.get("/scores", response_class=HTMLResponse, include_in_schema=False)
async def scores_page(request: Request, store: Store, viewer: Reader,
                      scorer: Text = None, evaluation: Text = None) -> HTMLResponse:
    options = await filter_choices.load(store)
    chosen = filter_choices.scorer(options, scorer)
    of = filter_choices.evaluation(options, evaluation)
    if chosen is None:
        return page(request, "scores.html", options=options, chosen=None, rows=[],
                    notes={}, per_snapshot=[], recall_series=[], precision_series=[],
                    evaluation=of, days=[])
    rows, notes = await figures.load(store, *chosen, scope=figures.Scope(evaluation=of))
    runs = await evaluation_standing.counted_runs(store, of) if of else None
    split = await figures.breakdown(store, chosen, runs)
    per_snapshot, by_day = split.per_snapshot, split.by_day
    return page(request, "scores.html", options=options, chosen=filter_choices.ref(chosen),
                evaluation=of,
                rows=_plotted(rows), notes=notes, per_snapshot=per_snapshot,
                recall_series=plots.over_time(by_day, "group", "recall"),
                precision_series=plots.over_time(by_day, "group", "precision"),
                bar_width=plots.BAR_WIDTH, width=plots.WIDTH, height=plots.HEIGHT,
                days=plots.days_of(by_day), x_ticks=plots.day_ticks(plots.days_of(by_day)),
                y_ticks=plots.Y_TICKS, method=intervals.METHOD)


@router.get("/compare", response_class=HTMLResponse, include_in_schema=False)
async def compare_page(request: Request, store: Store, viewer: Reader,
                       a: Text = None, b: Text = None) -> HTMLResponse:
    """Two scorers (`a`, `b`) over every recorded run; with one scorer only, the paired
    differences between the models and definitions it scored."""
    options = await filter_choices.load(store)
    result = differences = None
    if a and b:
        filter_choices.scorer(options, a)  # each must be registered: refused otherwise
        filter_choices.scorer(options, b)
        result = await comparison.compare(store, a, b, rescoring.Selection(everything=True))
    elif a or options.active:
        chosen = filter_choices.scorer(options, a)
        if chosen:
            _, notes = await figures.load(store, *chosen)
            differences = notes.get("differences", [])
    return page(request, "compare.html", options=options, a=a or options.active, b=b,
                result=result, differences=differences, method=intervals.METHOD)

"""The runs table, and one run: its issues against the code, its conversation with the
model, its timeline and container logs."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from props.core.domain import catalog, evaluations, streams
from props.core.log import errors
from props.core.log.events import details
from props.projections import filter_choices, run_pages, run_view
from props.tools.http.dependencies import RunNamed, Store
from props.tools.http.viewer.session import Viewer, needs
from props.tools.http.viewer.templating import page

router = APIRouter()
Reader = Annotated[Viewer, Depends(needs("read"))]
Text = Annotated[str | None, Query(max_length=200)]
PER_PAGE = 50
ISSUES_PER_PAGE = 100
TURNS_PER_PAGE = 40


class InvalidQuery(errors.PropsError):
    """A filter the page cannot take (an unparsable date): 422."""

    exit_code = 65  # EX_DATAERR, as the CLI says of input it cannot take


def _day(text: str | None, field: str) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.combine(dt.date.fromisoformat(text), dt.time(), dt.UTC)
    except ValueError:
        raise InvalidQuery(f"{field}: {text[:40]!r} is not a date (YYYY-MM-DD)") from None


@router.get("/", include_in_schema=False)
@router.get("/runs", response_class=HTMLResponse, include_in_schema=False)
async def runs_page(
    request: Request, store: Store, viewer: Reader,
    model: Text = None, definition: Text = None, snapshot: Text = None,
    file_set: Text = None, status: catalog.RunStatus | Literal[""] = "",
    scorer: Text = None, since: Text = None, until: Text = None, evaluation: Text = None,
    sort: Literal["newest", "oldest", "cost", "duration", "tokens"] = "newest",
    page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    options = await filter_choices.load(store)
    shown_scorer = filter_choices.scorer(options, scorer)
    start, end = _day(since, "since"), _day(until, "until")
    chosen = filter_choices.evaluation(options, evaluation)
    where = run_pages.TableFilter(
        "critic", status or None, model or None, definition or None, snapshot or None,
        file_set=file_set or None, scorer=shown_scorer if scorer else None,
        since=start, until=end + dt.timedelta(days=1) if end else None,
        run_ids=await evaluations.runs_of(store, chosen) if chosen else None)
    rows, more = await run_pages.table(store, where, sort, PER_PAGE,
                                       (page_number - 1) * PER_PAGE)
    names = await run_pages.file_set_names(store, [r["files_hash"] for r in rows
                                                   if r["files_hash"]]) if rows else {}
    scores = await run_pages.scores_of(store, [r["run_id"] for r in rows],
                                       shown_scorer) if rows and shown_scorer else {}
    parked = await run_pages.parked_counts(store, [r["run_id"] for r in rows]) if rows else {}
    query = {k: v for k, v in request.query_params.items() if k != "page"}
    return page(request, "runs.html", rows=rows, scores=scores, more=more, parked=parked,
                file_sets=names,
                parked_overall=await run_pages.parked_overall(store),
                page_number=page_number, options=options, query=query,
                shown_scorer=filter_choices.ref(shown_scorer), sort=sort,
                filters={"model": model, "definition": definition, "snapshot": snapshot,
                         "file_set": file_set, "status": status, "scorer": scorer,
                         "since": since, "until": until, "evaluation": evaluation})


MATCHES = f"^({'|'.join((*run_view.KINDS, run_view.UNGRADED))})$"  # ?match=: one kind
# From this many issues on a page, each file's are folded under its name (with their count).
GROUPED_FROM = 20


@router.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
async def run_page(
    request: Request, store: Store, viewer: Reader, run_id: RunNamed,
    scorer: Text = None,
    issues_page: Annotated[int, Query(alias="issues", ge=1, le=100_000)] = 1,
    match: Annotated[str | None, Query(pattern=MATCHES)] = None,
) -> HTMLResponse:
    shown = await run_pages.shown(store, run_id, scorer, run_pages.IssuesWanted(
        issues_page, ISSUES_PER_PAGE, match))
    return page(request, "run.html", run=shown.header, tab="issues", found=shown.found,
                scores=shown.scores,
                issues_page=issues_page, per_page=ISSUES_PER_PAGE,
                kinds=(*run_view.KINDS, run_view.UNGRADED), grouped=GROUPED_FROM)


@router.get("/runs/{run_id}/transcript", response_class=HTMLResponse, include_in_schema=False)
async def transcript_page(
    request: Request, store: Store, viewer: Reader, run_id: RunNamed,
    turns_page: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    run = await run_pages.detail(store, run_id)
    said = await run_view.transcript(store, run.events, turns_page, TURNS_PER_PAGE)
    return page(request, "transcript.html", run=await run_pages.header(store, run),
                tab="transcript", said=said, turns_page=turns_page, per_page=TURNS_PER_PAGE)


@router.get("/runs/{run_id}/timeline", response_class=HTMLResponse, include_in_schema=False)
async def timeline_page(request: Request, store: Store, viewer: Reader,
                        run_id: RunNamed) -> HTMLResponse:
    run = await run_pages.detail(store, run_id)
    # The run's own events and its grades' (each scorer's stream), in the log's order.
    records = sorted([*run.events, *await run_pages.grading_events(store, run.run_id)],
                     key=lambda r: r.global_position)
    events = [{"version": r.stream_version, "type": r.type_name, "at": r.recorded_at,
               # a grade's stream, by its scorer (streams.grading)
               "stream": "run" if r.stream_id == streams.run(run.run_id) else
               streams.scorer_of_grading(r.stream_id, run.run_id),
               "data": details(r.event)} for r in records]
    return page(request, "timeline.html", run=await run_pages.header(store, run), tab="timeline",
                events=events, logs=await run_view.logs(store, run.events))

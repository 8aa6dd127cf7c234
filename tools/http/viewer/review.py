"""The review queue: the oldest grade no person has judged, beside the code, with one key
per verdict; each verdict a `grade.reviewed` event under the token's name."""

from __future__ import annotations

import string
import uuid
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from props.core.log import errors
from props.core.scoring import reviews
from props.projections import filter_choices, run_view
from props.tools.http.dependencies import Store
from props.tools.http.viewer import forms
from props.tools.http.viewer.session import Viewer, needs
from props.tools.http.viewer.templating import page

router = APIRouter()
Reviewer = Annotated[Viewer, Depends(needs("review"))]
KEYS = string.digits[1:] + "abdefghijklmopqrstuvwxyz"  # c confirms, n says "nothing"


def _choices(item: reviews.Pending) -> list[dict[str, Any]]:
    """Every match a reviewer can give, each with its key."""
    found: list[dict[str, Any]] = [{"value": "none", "label": "nothing known", "key": "n",
                                    "rationale": ""}]
    for n, ((kind, ident, occurrence), row) in enumerate(sorted(
            item.truth.items(), key=lambda kv: (kv[0][0] != "tp", kv[0][1], kv[0][2] or 0))):
        label = f"TP {ident}#{occurrence}" if kind == "tp" else f"decoy {ident}"
        value = f"tp:{ident}#{occurrence}" if kind == "tp" else f"fp:{ident}"
        found.append({"value": value, "label": label, "rationale": row.get("rationale", ""),
                      "key": KEYS[n] if n < len(KEYS) else None})
    return found


@router.get("/review", response_class=HTMLResponse, include_in_schema=False)
async def review_page(request: Request, store: Store, viewer: Reviewer,
                      scorer: Annotated[str | None, Query(max_length=200)] = None,
                      done: Annotated[str | None, Query(max_length=400)] = None,
                      ) -> HTMLResponse:
    """`done`: RUN/ISSUE just judged, skipped while the projections catch up with it."""
    options = await filter_choices.load(store)
    chosen = filter_choices.scorer(options, scorer)
    if chosen is None:
        return page(request, "review.html", options=options, chosen=None, item=None,
                    left=0)
    found = [p for p in await reviews.pending(store, *chosen, limit=2)
             if f"{p.grade['run_id']}/{p.grade['issue_id']}" != done]
    left = await reviews.count_pending(store, *chosen, _judged(done))
    if not found:
        return page(request, "review.html", options=options, chosen=filter_choices.ref(chosen),
                    item=None, left=0)
    item = found[0]
    truth = item.matched_truth
    code = await run_view.excerpts(store, item.grade["snapshot"], item.grade["ground_truth_hash"],
                                   [item.grade["locations"], truth["locations"] if truth else []])
    return page(request, "review.html", options=options, chosen=filter_choices.ref(chosen),
                item=item, truth=truth, issue_code=code[0], truth_code=code[1],
                choices=_choices(item), left=left)


def _judged(done: str | None) -> tuple[uuid.UUID, str] | None:
    """RUN/ISSUE of the verdict just given (the page's `done`), if it names one."""
    run, _, issue = (done or "").partition("/")
    try:
        return (uuid.UUID(run), issue) if issue else None
    except ValueError:
        return None


def _match(value: str) -> reviews.Match:
    if value == "none":
        return reviews.Match()
    kind, _, ident = value.partition(":")
    if kind == "tp":
        return reviews.Match.parse_tp(ident)
    if kind == "fp" and ident:
        return reviews.Match(fp_id=ident)
    raise errors.InvalidEvent(f"{value[:60]!r} is not a match (none, tp:ID#N or fp:ID)")


@router.post("/review", include_in_schema=False)
async def give_verdict(request: Request, store: Store, viewer: Reviewer) -> RedirectResponse:
    form = await forms.read(request, {"csrf", "run_id", "issue_id", "scorer", "verdict",
                                      "note"}, viewer.csrf)
    try:
        run_id = uuid.UUID(form.get("run_id", ""))
    except ValueError:
        raise errors.InvalidEvent("run_id is not a run id") from None
    issue_id, verdict, note = form.get("issue_id", ""), form.get("verdict", ""), \
        form.get("note", "")
    scorer = filter_choices.parse(form.get("scorer", ""))
    if len(note) > 2000 or not issue_id:
        raise errors.InvalidEvent("a verdict names an issue, and its note is 2,000 characters "
                                  "at most")
    if verdict == "confirm":
        await reviews.confirm(store, run_id, issue_id, *scorer, viewer.name, note)
    else:
        await reviews.correct(store, run_id, issue_id, _match(verdict), viewer.name, note)
    done = urlencode({"scorer": filter_choices.ref(scorer), "done": f"{run_id}/{issue_id}"})
    return RedirectResponse(f"/review?{done}", status_code=303)

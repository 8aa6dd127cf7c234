"""Scores: recall and precision per model, definition and scorer (the report's figures)."""

from __future__ import annotations

from typing import Any

import pydantic
from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError

from props.core.log import errors
from props.projections import figures
from props.tools.http.dependencies import Read, Store
from props.tools.http.limits import STORABLE_TEXT

router = APIRouter()
# NAME or NAME@VERSION, a version from 1 to 999,999,999 (the log's bound is 2^31-1): what
# the pattern admits, the route takes; an unknown name is a 404.
SCORER = r"^[^@\x00]+(@[1-9][0-9]{0,8})?$"


class Scores(pydantic.BaseModel):
    scores: list[dict[str, Any]]
    evidence: dict[str, Any] = pydantic.Field(
        description="every critic run in one state under `states_scorer` (scored, "
        "parked, unfinished, not completed, no issues, ungraded, unscorable: they add up to "
        "critic_runs), the scope asked for, the scored runs from imported files, the "
        "interval method, and the paired differences between rows of one scorer")


def _scope(what: str) -> Any:
    return Query(None, min_length=1, max_length=200, pattern=STORABLE_TEXT,
                 description=f"only the runs of this {what}")


@router.get("/api/scores", response_model=Scores, dependencies=Read,
            summary="recall and precision per model, definition and scorer")
async def scores(store: Store, scorer: str | None = Query(
        None, max_length=200, pattern=SCORER, description="NAME or NAME@VERSION"),
        model: str | None = _scope("model"), definition: str | None = _scope("definition"),
        snapshot: str | None = _scope("snapshot"),
        evaluation: str | None = _scope("evaluation (every version and retry)")) -> Scores:
    try:
        name, version = figures.scorer_filter(scorer)
    except errors.PropsError as exc:
        raise RequestValidationError([{"loc": ("query", "scorer"), "msg": str(exc),
                                       "type": "value_error"}]) from None
    records, evidence = await figures.load(
        store, name, version, scope=figures.Scope(model, definition, snapshot, evaluation))
    return Scores(scores=records, evidence=evidence)

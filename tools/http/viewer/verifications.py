"""A scorer's verifications: every one recorded, and one's divergence report (its buckets,
the runs behind each, and for each diverged find the reason and the judge's recorded
answer), read from the log as `props scorers verify` recorded it (props.core.scoring
.divergence)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from props.core.log import errors
from props.core.scoring import divergence
from props.tools.http.dependencies import Store
from props.tools.http.viewer.session import Viewer, needs
from props.tools.http.viewer.templating import page

router = APIRouter()
Reader = Annotated[Viewer, Depends(needs("read"))]


@router.get("/verifications", response_class=HTMLResponse, include_in_schema=False)
async def verifications_page(request: Request, store: Store, viewer: Reader) -> HTMLResponse:
    return page(request, "verifications.html", rows=await divergence.recorded(store))


@router.get("/verifications/{verification_id}", response_class=HTMLResponse,
            include_in_schema=False)
async def verification_page(request: Request, store: Store, viewer: Reader,
                            verification_id: str) -> HTMLResponse:
    try:
        vid = uuid.UUID(verification_id[:100])
    except ValueError:
        raise errors.NotFound("no verification by that id (its ids are uuids: see "
                              "/verifications)") from None
    report = await divergence.report(store, vid)
    return page(request, "verification.html", report=report, v=report.verified,
                buckets=report.buckets(), answers={r.run_id: r.answers for r in report.runs})

"""Health: a probe without a token, and the service's state for a reader."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import pydantic
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from props.projections import status as projection_status
from props.reactors import host
from props.tools.http.dependencies import Read, Store

router = APIRouter()


class Liveness(pydantic.BaseModel):
    status: Literal["ok", "unavailable"]


class Health(pydantic.BaseModel):
    status: Literal["ok", "degraded"]
    database: str
    reactors: list[dict[str, Any]]
    projections: list[dict[str, Any]]


@router.get("/health", response_model=Liveness,
            summary="200 `ok` while the database answers, else 503; no token needed (for "
                    "load balancers and container probes)")
async def liveness(store: Store) -> JSONResponse:
    try:
        with anyio.fail_after(5):
            await store.reader.ping()
    except Exception:
        return JSONResponse({"status": "unavailable"}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/api/health", response_model=Health, dependencies=Read,
            summary="database, reactors and projections: reachable, and how far behind")
async def health(store: Store) -> Health:
    await store.reader.ping()
    reactors = [{"name": r.name, "lag_events": r.lag_events,
                 "lag_seconds": r.lag_seconds, "parked": r.parked}
                for r in await host.status(store)]
    projections = [{"name": s.name, "lag_events": s.lag_events,
                    "lag_seconds": s.lag_seconds} for s in await projection_status.of(store)]
    stuck = any(r["parked"] for r in reactors)
    return Health(status="degraded" if stuck else "ok", database="ok",
                  reactors=reactors, projections=projections)

"""What every route depends on: the store, the request's token with the scope it needs, and
the run a path names."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pydantic
from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from props.core.domain import quotas, run_requests, streams, tokens, vocabulary
from props.core.log.store import EventStore
from props.tools.http.auth import authorize

_bearer = HTTPBearer(auto_error=False, description="a props token (props tokens create)")


def store_of(request: Request) -> EventStore:
    store: EventStore = request.app.state.store
    return store


class Problem(pydantic.BaseModel):
    """Every refusal's body: a sentence, or FastAPI's list of fields with what is wrong."""

    detail: str | list[dict[str, Any]]


def refusal(description: str) -> dict[str, Any]:
    """A status a route declares besides the app's: its body is a Problem like every other
    refusal (a route's own entry replaces the app's whole, body included)."""
    return {"model": Problem, "description": description}


OVER_QUOTA: dict[int | str, dict[str, Any]] = {429: refusal(
    "the token is over one of its quotas (the sentence names it); nothing was written: "
    "retry once its runs finish (Retry-After)")}


def quotas_of(request: Request) -> quotas.Quotas:
    found: quotas.Quotas = request.app.state.quotas
    return found


def scope(needed: vocabulary.Scope) -> Callable[..., Awaitable[tokens.Token]]:
    """A dependency: the request's token, which must allow `needed` (401/403 otherwise)."""
    async def check(request: Request, credentials: Annotated[
            HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> tokens.Token:
        token = await authorize(store_of(request), request.headers.get("authorization"),
                                needed)
        request.state.token_name = token.name
        return token
    return check


async def run_named(request: Request, run_id: Annotated[str, Path(
        pattern=streams.RUN_REF, description="the run's id, or a unique start of it (4 hex "
        "digits or more; tables show 8)")]) -> uuid.UUID:
    """The run a path names: its id or a prefix (404 naming none, 400 naming several)."""
    return await run_requests.resolve(store_of(request), run_id)


# Module-level: FastAPI reads these annotations from the module's globals.
RunNamed = Annotated[uuid.UUID, Depends(run_named)]
RequestToken = Annotated[tokens.Token, Depends(scope("request"))]
Read = [Depends(scope("read"))]
Store = Annotated[EventStore, Depends(store_of)]
Quota = Annotated[quotas.Quotas, Depends(quotas_of)]

"""What every route depends on: the store, and the request's token with the scope it needs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from props.core.domain import tokens, vocabulary
from props.core.log.store import EventStore
from props.tools.api.auth import authorize

_bearer = HTTPBearer(auto_error=False, description="a props token (props tokens create)")


def store_of(request: Request) -> EventStore:
    store: EventStore = request.app.state.store
    return store


def scope(needed: vocabulary.Scope) -> Callable[..., Awaitable[tokens.Token]]:
    """A dependency: the request's token, which must allow `needed` (401/403 otherwise)."""
    async def check(request: Request, credentials: Annotated[
            HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> tokens.Token:
        token = await authorize(store_of(request), request.headers.get("authorization"),
                                needed)
        request.state.token_name = token.name
        return token
    return check


# Module-level: FastAPI reads these annotations from the module's globals.
RequestToken = Annotated[tokens.Token, Depends(scope("request"))]
Read = [Depends(scope("read"))]
Store = Annotated[EventStore, Depends(store_of)]

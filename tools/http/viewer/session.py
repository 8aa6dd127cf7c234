"""Who is looking: a props token, given once on the login form (or in `Authorization` on
every request, as the JSON API takes it), kept in a session cookie.

The cookie holds the token itself, HttpOnly (no script reads it) and SameSite=Strict (no
other site's page sends it), and Secure over HTTPS; every request checks it against
props.api_tokens, so revoking the token ends its sessions at once. Every POST carries a CSRF
token derived from the session's secret (an HMAC: nothing stored, nothing to guess without
the secret), compared in constant time; the login form, before any session, is protected
the same way by a random value in a cookie of its own (double submit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request

from props.core.domain import tokens, vocabulary
from props.tools.http.auth import secret_of
from props.tools.http.dependencies import store_of

COOKIE = "props_session"
LOGIN_COOKIE = "props_login"
SESSION_SECONDS = 12 * 3600
MAX_TOKEN_CHARS = 200  # props tokens are 43: anything far longer is not one


class SignInNeeded(Exception):
    """No valid session: the page sends the browser to the login form."""


class NotAllowed(Exception):
    """A valid session whose token lacks the page's scope (403)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadForm(Exception):
    """A POST without its CSRF token, or with fields the page does not take (400/403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass(frozen=True)
class Viewer:
    token: tokens.Token
    csrf: str
    by_cookie: bool

    @property
    def name(self) -> str:
        return self.token.name

    def may(self, scope: vocabulary.Scope) -> bool:
        return self.token.allows(scope)


def csrf_for(secret: str) -> str:
    return hmac.new(b"props viewer csrf", secret.encode(), hashlib.sha256).hexdigest()


def check_csrf(expected: str, given: str | None) -> None:
    if not given or not hmac.compare_digest(expected, given):
        raise BadForm(403, "this form is out of date or did not come from this viewer "
                           "(its CSRF token does not match): reload the page and try again")


async def _viewer(request: Request) -> Viewer | None:
    header = request.headers.get("authorization")
    secret = secret_of(header) if header else request.cookies.get(COOKIE)
    if not secret or len(secret) > MAX_TOKEN_CHARS:
        return None
    token = await tokens.verify(store_of(request), secret)
    return Viewer(token, csrf_for(secret), by_cookie=not header) if token else None


def needs(scope: vocabulary.Scope) -> Callable[[Request], Awaitable[Viewer]]:
    """A dependency: the signed-in viewer, whose token must allow `scope`."""
    async def check(request: Request) -> Viewer:
        viewer = await _viewer(request)
        if viewer is None:
            raise SignInNeeded()
        request.state.viewer = viewer
        request.state.token_name = viewer.name  # for the access log
        if not viewer.may(scope):
            raise NotAllowed(f"token {viewer.name!r} lacks the {scope!r} scope (it has: "
                             f"{', '.join(viewer.token.scopes)})")
        return viewer
    return check


def login_nonce() -> str:
    return secrets.token_urlsafe(24)


def cookie_options(request: Request, max_age: int) -> dict[str, Any]:
    return {"max_age": max_age, "httponly": True, "samesite": "strict",
            "secure": request.url.scheme == "https", "path": "/"}

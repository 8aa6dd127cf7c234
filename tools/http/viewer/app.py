"""The viewer: its pages, its sign-in, its assets, and its errors as pages (the JSON API
answers its own as JSON; props.tools.http.app puts the two in one app)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from props.core.domain import tokens
from props.core.log import errors
from props.tools.http.dependencies import Store
from props.tools.http.viewer import (
    evaluations,
    forms,
    review,
    runs,
    scores,
    session,
    verifications,
)
from props.tools.http.viewer.templating import page

STATIC = Path(__file__).parent / "static"
PAGES = ("/runs", "/evaluations", "/scores", "/compare", "/verifications", "/review", "/login",
         "/logout", "/static")
router = APIRouter()


def is_page(path: str) -> bool:
    """Whether a request is the viewer's (its errors are pages, not JSON)."""
    return path == "/" or any(path == p or path.startswith(p + "/") for p in PAGES)


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this viewer only (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/runs"
    return target


@router.get("/login", response_class=HTMLResponse, include_in_schema=False)
async def login_form(request: Request,
                     next: Annotated[str | None, Query(max_length=2000)] = None) -> Response:
    nonce = session.login_nonce()
    response = page(request, "login.html", nonce=nonce, next=_safe_next(next), error=None)
    response.set_cookie(session.LOGIN_COOKIE, nonce, **session.cookie_options(request, 600))
    return response


@router.post("/login", include_in_schema=False)
async def login(request: Request, store: Store) -> Response:
    form = await forms.read(request, {"token", "nonce", "next"}, None)
    session.check_csrf(request.cookies.get(session.LOGIN_COOKIE, ""), form.get("nonce"))
    secret = form.get("token", "").strip()
    token = await tokens.verify(store, secret) if 0 < len(secret) <= session.MAX_TOKEN_CHARS \
        else None
    if token is None or not token.allows("read"):
        nonce = session.login_nonce()
        response = page(request, "login.html", status=401, nonce=nonce,
                        next=_safe_next(form.get("next")),
                        error="that token is unknown, revoked, or lacks the read scope")
        response.set_cookie(session.LOGIN_COOKIE, nonce, **session.cookie_options(request, 600))
        return response
    signed_in = RedirectResponse(_safe_next(form.get("next")), status_code=303)
    signed_in.set_cookie(session.COOKIE, secret,
                        **session.cookie_options(request, session.SESSION_SECONDS))
    signed_in.delete_cookie(session.LOGIN_COOKIE, path="/")
    return signed_in


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    secret = request.cookies.get(session.COOKIE, "")
    await forms.read(request, {"csrf"}, session.csrf_for(secret) if secret else "")
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(session.COOKIE, path="/")
    return response


def _error(request: Request, status: int, message: str) -> Response:
    return page(request, "error.html", status=status, status_code=status, message=message)


def install(app: FastAPI) -> None:
    """Add the viewer's pages and assets to the app."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for area in (router, runs.router, evaluations.router, scores.router, verifications.router,
                 review.router):
        app.include_router(area)


async def _sign_in(request: Request, exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.method != "GET":
        return _error(request, 401, "your session has ended: sign in again")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)


async def _not_allowed(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, session.NotAllowed)
    return _error(request, 403, exc.message)


async def _bad_form(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, session.BadForm)
    return _error(request, exc.status, exc.message)


async def _unprocessable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    found = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg')}"
                      for e in exc.errors()[:5])
    return _error(request, 422, f"this page does not take that: {found}")


async def _props_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, errors.NotFound):
        return _error(request, 404, str(exc))
    assert isinstance(exc, errors.PropsError)
    # A filter naming no scorer is a value the page cannot take (422), as a malformed one is.
    unprocessable = exc.exit_code == 65 or isinstance(exc, errors.UnknownScorer)
    return _error(request, 422 if unprocessable else 400, str(exc))


PageHandler = Callable[[Request, Exception], Awaitable[Response]]


def errors_as_pages() -> dict[type[Exception], PageHandler]:
    """The page each error on the viewer's paths is shown as, by the error's class."""
    return {session.SignInNeeded: _sign_in, session.NotAllowed: _not_allowed,
            session.BadForm: _bad_form, RequestValidationError: _unprocessable,
            errors.PropsError: _props_error}

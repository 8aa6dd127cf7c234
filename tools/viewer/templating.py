"""Rendering pages: one Jinja2 environment that escapes every value, and shows the
characters that make text lie about itself.

Everything a page shows may come from an agent, a requester or a specimen author. The
environment autoescapes (so `<script>` is text and `{{7*7}}` in data is never evaluated:
data is never template source), and `finalize` runs on every value a template prints: bidi
controls and zero-width characters (the "Trojan Source" tricks, which reorder or hide code)
are shown as visible marks naming their code point. Pages are sent with a policy that runs
only the package's own script and style.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup, escape

# Bidi embeddings, overrides and isolates, marks, and the zero-width characters.
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def shown(value: Any) -> Any:
    """A printed value: text escaped, its invisible characters made visible; Markup (what
    the templates built) and numbers as they are."""
    if value is None:
        return ""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    text = str(escape(value))
    if _INVISIBLE.search(text):
        text = _INVISIBLE.sub(
            lambda m: f'<span class="invisible" title="an invisible character">'
                      f'U+{ord(m[0]):04X}</span>', text)
    return Markup(text)


def when(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def number(value: float | int | None) -> str:
    return "-" if value is None else f"{value:,}"


ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("props.tools.viewer", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, finalize=shown,
    trim_blocks=True, lstrip_blocks=True, auto_reload=False)
ENV.filters.update(when=when, duration=duration, percent=percent, money=money, number=number)


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The rendered template, with what every page shows (who is signed in, the CSRF token
    forms send back) and the security headers."""
    viewer = getattr(request.state, "viewer", None)
    html = ENV.get_template(template).render(request=request, viewer=viewer, **context)
    return HTMLResponse(html, status_code=status, headers=HEADERS)

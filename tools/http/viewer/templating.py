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

from props.core.domain import vocabulary
from props.tools.http.viewer import plots

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


def when_ms(value: dt.datetime | None) -> str:
    """A time to the millisecond (a run's events come milliseconds apart)."""
    return value.astimezone(dt.UTC).strftime("%H:%M:%S.%f")[:-3] if value else "-"


def groupby_file(issues: list[Any]) -> list[tuple[str, list[Any]]]:
    """A page's issues by the file they name first, in the page's order (by file)."""
    groups: dict[str, list[Any]] = {}
    for issue in issues:
        first = issue.excerpts[0].file if issue.excerpts else "(no file)"
        groups.setdefault(first, []).append(issue)
    return list(groups.items())


def kinds_of(issues: list[Any], scorer: str | None) -> list[tuple[str, int]]:
    """How many of `issues` each kind of grade under `scorer` has (a file's summary)."""
    counts: dict[str, int] = {}
    for issue in issues:
        kind = next((g.kind for g in issue.grades if g.scorer == scorer), "ungraded")
        counts[kind] = counts.get(kind, 0) + 1
    return sorted(counts.items())


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
    loader=jinja2.PackageLoader("props.tools.http.viewer", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, finalize=shown,
    trim_blocks=True, lstrip_blocks=True, auto_reload=False)
ENV.globals.update(interval_ticks=plots.TICKS,  # every interval's axis: 0%, 50%, 100%
                   run_statuses=vocabulary.RUN_STATUSES)
ENV.filters.update(when=when, when_ms=when_ms, duration=duration, percent=percent,
                   money=money, number=number, groupby_file=groupby_file, kinds_of=kinds_of)


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The rendered template, with what every page shows (who is signed in, the CSRF token
    forms send back) and the security headers."""
    viewer = getattr(request.state, "viewer", None)
    html = ENV.get_template(template).render(request=request, viewer=viewer, **context)
    return HTMLResponse(html, status_code=status, headers=HEADERS)

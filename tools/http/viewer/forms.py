"""The viewer's POST bodies: URL-encoded forms, small, with the fields a page names and a
valid CSRF token; refused whole otherwise (nothing is written on a refusal)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import Request

from props.tools.http import limits
from props.tools.http.viewer.session import BadForm, check_csrf

MAX_FORM_BYTES = 16 * 1024


async def read(request: Request, fields: set[str], csrf: str | None) -> dict[str, str]:
    """The form's fields (each once, each named in `fields`); `csrf`: the token the form
    must carry back (None: the caller checks its own)."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise BadForm(415, "the viewer takes forms (application/x-www-form-urlencoded)")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise BadForm(413, f"the form is over {MAX_FORM_BYTES:,} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                          max_num_fields=len(fields) + 1)
    except (UnicodeDecodeError, ValueError):
        raise BadForm(400, "the form is not URL-encoded UTF-8") from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name not in fields or name in found:
            raise BadForm(400, "the form has an unexpected or repeated field "
                               f"{limits.excerpt(name)!r}")
        try:
            limits.check_text(value, f"field {name!r}")
        except limits.Refused as exc:
            raise BadForm(400, str(exc)) from None
        found[name] = value
    if csrf is not None:
        check_csrf(csrf, found.get("csrf"))
    return found

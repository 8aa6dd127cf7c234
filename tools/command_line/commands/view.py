"""`props view`: the web viewer on the database in use, for one analyst at a terminal."""

from __future__ import annotations

from typing import Any

DEFAULT_LISTEN = "127.0.0.1:8765"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "view", help="open the web viewer: runs, transcripts, issues against the code, scores",
        description="Serve the web viewer (and the JSON API) on the database in use "
        "(PROPS_DSN, or the embedded server when it is unset) until Ctrl-C, keeping the "
        "projections up to date meanwhile. It prints the address and a token to sign in "
        "with (scopes read and review), which is revoked when props view stops. "
        "`props serve --http` serves the same viewer as part of the service.")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve (default {DEFAULT_LISTEN}; port 0: any free port)")
    p.add_argument("--open", action="store_true",
                   help="open the address in this machine's web browser")
    p.set_defaults(handler="view:view_cmd", connections=8)

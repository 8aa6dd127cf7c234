"""`props tokens create|list|revoke`: who may use the HTTP API and the registry proxy."""

from __future__ import annotations

from typing import Any

from props.core.domain import vocabulary
from props.tools.command_line import arguments


def add_parser(sub: Any) -> None:
    t = sub.add_parser(
        "tokens", help="tokens of the HTTP API and the registry proxy: create, list, revoke",
        description="Every request to `props serve --http` or `--registry` carries a token. "
        "Scopes: read (runs, scores, health, image pulls), request (request runs), push "
        "(push agent images through the registry proxy), admin (all of them). Only a hash "
        "of each token is stored: a token is shown once, when it is made. The first start "
        "of `props serve --http` makes and prints an admin token.")
    cmds = t.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    p = cmds.add_parser("create", help="make a token and print it (once)",
                        description="Make a token NAME with the given scopes. The token "
                        "goes to stdout on its own line (for scripts); keep it, it cannot be "
                        "shown again.")
    p.add_argument("name", help="what the token is for, e.g. ci or alice")
    p.add_argument("--scope", action="append", choices=vocabulary.SCOPES, required=True,
                   dest="scopes", help="a scope (repeatable)")
    p.set_defaults(handler="tokens:create_cmd", connections=1)
    p = cmds.add_parser("list", help="every token: name, scopes, made, revoked (no secrets)")
    arguments.add_format(p)
    p.set_defaults(handler="tokens:list_cmd", connections=1)
    p = cmds.add_parser("revoke", help="revoke a token by name or id (at once, for good)")
    p.add_argument("token", metavar="NAME|ID", help="the token's name, or its id")
    p.set_defaults(handler="tokens:revoke_cmd", connections=1)

"""`props tokens create|list|revoke`: who may use the HTTP API and the registry proxy."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from props.core.domain import tokens, vocabulary
from props.core.domain.store import open_store
from props.tools import render
from props.tools.render import Console

out = Console(highlight=False)


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
    p.set_defaults(handler=create_cmd)
    p = cmds.add_parser("list", help="every token: name, scopes, made, revoked (no secrets)")
    render.add_format(p)
    p.set_defaults(handler=list_cmd)
    p = cmds.add_parser("revoke", help="revoke a token by name or id (at once, for good)")
    p.add_argument("token", metavar="NAME|ID", help="the token's name, or its id")
    p.set_defaults(handler=revoke_cmd)


async def create_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=1) as store:
        token, secret = await tokens.create(store, args.name, tuple(args.scopes))
    print(secret)
    print(f"token {token.name} ({', '.join(token.scopes)}): shown once, store it now",
          file=sys.stderr)
    return 0


async def list_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=1) as store:
        rows = [{"name": t.name, "scopes": list(t.scopes), "created_at": t.created_at,
                 "revoked_at": t.revoked_at, "id": t.id}
                for t in await tokens.all_tokens(store)]
    render.emit(args.format, rows, [("name", "name"), ("scopes", "scopes"),
                                    ("created_at", "created"), ("revoked_at", "revoked"),
                                    ("id", "id")],
                empty="no tokens: `props serve` prints an admin token at its first start",
                cells={"scopes": lambda s: ", ".join(s)})
    return 0


async def revoke_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=1) as store:
        token = await tokens.revoke(store, args.token)
    out.print(f"revoked token {token.name} ({token.id})")
    return 0

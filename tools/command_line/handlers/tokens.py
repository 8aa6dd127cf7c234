"""What `props tokens` does: the handlers that the parsers of
`props.tools.command_line.commands.tokens` name."""

from __future__ import annotations

import argparse
import sys

from props.core.domain import tokens
from props.core.log.store import EventStore
from props.tools.command_line import render
from props.tools.command_line.render import Console

out = Console(highlight=False)


async def create_cmd(args: argparse.Namespace, store: EventStore) -> int:
    token, secret = await tokens.create(store, args.name, tuple(args.scopes))
    print(secret)
    print(f"token {token.name} ({', '.join(token.scopes)}): shown once, store it now",
          file=sys.stderr)
    return 0


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    rows = [{"name": t.name, "scopes": list(t.scopes), "created_at": t.created_at,
             "revoked_at": t.revoked_at, "id": t.id}
            for t in await tokens.all_tokens(store)]
    render.emit(args, rows, [("name", "name"), ("scopes", "scopes"),
                                    ("created_at", "created"), ("revoked_at", "revoked"),
                                    ("id", "id")],
                empty="no tokens: `props serve` prints an admin token at its first start",
                cells={"scopes": lambda s: ", ".join(s)})
    return 0


async def revoke_cmd(args: argparse.Namespace, store: EventStore) -> int:
    token = await tokens.revoke(store, args.token)
    out.print(f"revoked token {token.name} ({token.id})")
    return 0

"""What `props view` does: the viewer and the projection runner on the database in use,
with a token of this session's own."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
import webbrowser
from functools import partial

import anyio

from props.core.domain import tokens
from props.core.log import stopping
from props.core.log.store import EventStore
from props.reactors.service import Service, cancel_on_signal
from props.tools.command_line import logs
from props.tools.http import app as http_app
from props.tools.http import server as http_server

log = logging.getLogger("props.view")


async def view_cmd(args: argparse.Namespace, store: EventStore) -> int:
    logs.configure("text", args.verbose, access_log=False)
    sock = http_server.bind(args.listen, "viewer")
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    name = f"view-{secrets.token_hex(4)}"
    _, secret = await tokens.create(store, name, ("read", "review"))
    try:
        # Printed, never logged: the token exists only in this terminal and the browser.
        print(f"viewer on {url}\nsign in with this token (scopes read, review; revoked "
              f"when props view stops): {secret}\nCtrl-C stops", file=sys.stderr,
              flush=True)
        if args.open:
            webbrowser.open(f"{url}login")
        async with anyio.create_task_group() as tg:
            await tg.start(partial(cancel_on_signal, stop=stopping.current()),
                           tg.cancel_scope, "stopping the viewer")
            await tg.start(http_server.serve, http_app.create_app(store), sock)
            # The projections are what the viewer shows: kept current while it runs (in
            # one process at a time: a `props serve` elsewhere keeps doing it instead).
            await Service(store, [], only=["projections"]).run()
    finally:
        with stopping.shield(f"the viewer's token {name}: its revocation"):
            await tokens.revoke(store, name)
    return 0

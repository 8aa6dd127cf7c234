"""Hosting the API and the registry proxy with uvicorn inside `props serve`'s task group.

Uvicorn's own signal handling is switched off: `props serve` owns SIGTERM/SIGINT and stops
every part of the service together, each finishing what it has in hand.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import uvicorn

from props.core import errors

log = logging.getLogger("props.http")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # props serve handles the signals


def parse_address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise errors.ConfigurationError(f"{what} {text!r} is not HOST:PORT (e.g. 127.0.0.1:8080)")
    return host.strip("[]"), int(port)


def bind(address: str, what: str) -> socket.socket:
    """Bind now (port 0 picks a free port), so the address can be printed before serving."""
    host, port = parse_address(address, what)
    try:
        return socket.create_server((host, port), reuse_port=False)
    except OSError as exc:
        raise errors.ConfigurationError(f"cannot listen on {address} for the {what}: {exc}") \
            from exc


async def serve(app: Any, sock: socket.socket, stop: anyio.Event) -> None:
    """Serve `app` on `sock` until `stop`, then finish the requests in flight."""
    server = _Server(uvicorn.Config(app, log_config=None, access_log=False,
                                    timeout_graceful_shutdown=10, lifespan="off"))

    async def stop_when_asked() -> None:
        await stop.wait()
        server.should_exit = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_when_asked)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()

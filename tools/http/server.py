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
import anyio.abc
import uvicorn

from props.core.log import errors, stopping
from props.tools.command_line import arguments

log = logging.getLogger("props.http")


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = anyio.Event()  # started: answering on its socket

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # props serve handles the signals

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.up.set()


def bind(address: str, what: str) -> socket.socket:
    """Bind now (port 0 picks a free port), so the address can be printed before serving.

    The socket is made with IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets
    whose `proto` says TCP, and `socket.create_server` leaves it 0, which cost every
    keep-alive request a 40 ms delayed-ACK stall (measured: 48 ms vs 3 ms per request)."""
    host, port = arguments.parse_address(address, what)
    try:
        family, kind, proto, _, where = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(where)
            sock.listen(2048)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        raise errors.ConfigurationError(f"cannot listen on {address} for the {what}: {exc}") \
            from exc
    return sock


async def serve(app: Any, sock: socket.socket, *,
                task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` on `sock` until cancelled, then finish the requests in flight. Started
    (`await tg.start(serve, ...)`) once uvicorn answers on the socket."""
    server = _Server(uvicorn.Config(app, log_config=None, access_log=False,
                                    timeout_graceful_shutdown=10, lifespan="off"))

    async with anyio.create_task_group() as tg:
        async def serve_shielded() -> None:
            # Uvicorn's own shutdown (stop accepting, answer what is in flight) is the
            # graceful stop: it must run, not be cancelled halfway.
            with stopping.shield("the HTTP server's shutdown"):
                await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()  # it ended by itself

        tg.start_soon(serve_shielded, name="props-http-server")
        try:
            await server.up.wait()
            task_status.started()
            await anyio.sleep_forever()
        finally:
            server.should_exit = True

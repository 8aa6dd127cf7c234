"""Hosting an ASGI app with uvicorn inside a service's task group: the API and the registry
proxy (props serve), and the model gateway (the launcher's).

Uvicorn's own signal handling is switched off: `props serve` owns SIGTERM/SIGINT and stops
every part of the service together, each finishing what it has in hand.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import uvicorn

from props.core.log import stopping


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = anyio.Event()  # started: answering on its socket

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the service handles the signals

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.up.set()


async def serve(app: Any, sock: socket.socket, *, limit_concurrency: int | None = None,
                task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` on `sock` (TCP or a Unix socket, bound and listening) until cancelled,
    then finish the requests in flight. Started (`await tg.start(serve, ...)`) once uvicorn
    answers on the socket. `limit_concurrency`: connections and requests at once, past which
    uvicorn answers 503 at once rather than hold them."""
    server = _Server(uvicorn.Config(app, log_config=None, access_log=False,
                                    timeout_graceful_shutdown=10, lifespan="off",
                                    limit_concurrency=limit_concurrency,
                                    timeout_keep_alive=5))

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

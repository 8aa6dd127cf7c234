"""An engine endpoint of the chaos run's own, which it can take away for good.

The doomed launcher's Docker engine is a Unix socket of this run's that forwards every
connection to the machine's engine, so its containers are real ones. The fault
`engine-gone` cuts every open connection and removes the socket: from then on the launcher's
engine never answers again, as when a remote engine's host dies, while the machine's engine
(shared with the other launchers, perhaps with other work) is never touched.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import anyio.abc

from props.reactors.runtimes import docker_runtime


async def _pipe(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream,
                done: anyio.CancelScope) -> None:
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError,
                             anyio.ClosedResourceError):
        async for chunk in source:
            await sink.send(chunk)
    done.cancel()  # one side closed: the connection is over both ways


class EngineEndpoint:
    def __init__(self, path: Path, target: str | None = None) -> None:
        self.path = path
        self.target = (target or docker_runtime.engine_url()).removeprefix("unix://")
        self._scope = anyio.CancelScope()
        self.connections = 0

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    @property
    def gone(self) -> bool:
        return self._scope.cancel_called

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                    ) -> None:
        """Forward connections until `take_away()` (a task of the caller's task group)."""
        with self._scope:
            listener = await anyio.create_unix_listener(self.path)
            task_status.started()
            async with listener:
                await listener.serve(self._forward)

    def take_away(self) -> None:
        """For good: open connections are cut, new ones find no socket."""
        self._scope.cancel()
        self.path.unlink(missing_ok=True)

    async def _forward(self, client: anyio.abc.SocketStream) -> None:
        self.connections += 1
        async with client:
            try:
                upstream = await anyio.connect_unix(self.target)
            except OSError:  # the engine behind is restarting (no socket, or refused):
                return  # the caller sees a connection closed, as from the engine itself
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(_pipe, client, upstream, tg.cancel_scope, name="chaos-pipe-up")
                tg.start_soon(_pipe, upstream, client, tg.cancel_scope,
                              name="chaos-pipe-down")

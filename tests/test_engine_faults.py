"""An engine that goes away mid-answer, or never answers, is the engine unreachable: never a
defect of props, never a launcher hung holding a slot.

The chaos run of 12-06 failed a run as launcher_defect: the engine vanished while
`container.wait()` read its answer and aiohttp raised ClientPayloadError, which the Docker
runtime did not know. These tests put the Docker runtime (real aiodocker, real aiohttp) in
front of a real Unix socket server that answers like an engine, then cuts its body short, or
takes the connection and never answers; each has its control (the same server answering
whole, or an engine error that is a refusal), so each check is seen to tell the cases apart.
"""

from __future__ import annotations

import contextlib
import gc
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import anyio
import anyio.abc
import orjson
import pytest

from props.core.domain import catalog, definitions
from props.core.log import faults
from props.core.log.store import EventStore
from props.reactors.host import ReactorHost
from props.reactors.launcher import run_attempts
from props.reactors.launcher.launcher import Launcher
from props.reactors.runtimes.container_runtime import EngineRefused, EngineUnreachable, Outcome
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.conftest import once_per_ci
from tests.reactor_helpers import QUICK_AGENT, finished, push_code, request, sync_samples

pytestmark = once_per_ci  # what it checks does not depend on the server's kind

NAME = "props-test-engine-faults"
STATE = {"Status": "exited", "ExitCode": 0, "OOMKilled": False}

Answer = Callable[[str, str], Awaitable[bytes | None]]  # (method, path) -> reply (None: cut)


def _reply(status: int, body: object) -> bytes:
    data = orjson.dumps(body)
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nConnection: close"
            f"\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data


def _cut(body: bytes) -> bytes:
    """Headers promising a body, and only the start of it: the engine gone mid-answer."""
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(body) + 100}\r\n\r\n").encode() + body[: len(body) // 2]


async def _serve_one(stream: anyio.abc.ByteStream, answer: Answer) -> None:
    """One connection: one request read, answered (every reply closes the connection, a
    cut one with the engine), or never answered."""
    buffered = b""
    try:
        while b"\r\n\r\n" not in buffered:
            try:
                buffered += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
        head, body = buffered.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        method, path = lines[0].split(" ")[:2]
        length = next((int(h.split(":")[1]) for h in lines[1:]
                       if h.lower().startswith("content-length:")), 0)
        while len(body) < length:
            body += await stream.receive()
        reply = await answer(method, path)
        if reply is not None:
            await stream.send(reply)
    finally:  # (closed even when the server is stopped while it keeps silent)
        with anyio.CancelScope(shield=True):
            await stream.aclose()


@contextlib.asynccontextmanager
async def engine(tmp_path: Path, answer: Answer) -> AsyncIterator[str]:
    """A Unix socket that answers each request with `answer`; its URL."""
    path = tmp_path / f"engine-{uuid.uuid4().hex[:8]}.sock"
    async with await anyio.create_unix_listener(path) as listener, \
            anyio.create_task_group() as tg:
        async def serve() -> None:
            async def handle(stream: anyio.abc.ByteStream) -> None:
                await _serve_one(stream, answer)
            await listener.serve(handle)
        tg.start_soon(serve)
        try:
            yield f"unix://{path}"
        finally:
            tg.cancel_scope.cancel()


def _engine_answering(wait: bytes | None, logs: bytes | None = None) -> Answer:
    """An engine whose container exists and has exited; `wait` and `logs`: the replies to
    those two (cut or whole)."""
    async def answer(method: str, path: str) -> bytes | None:
        if path.endswith("/json"):
            return _reply(200, {"Id": "c0ffee", "Name": f"/{NAME}", "State": STATE,
                                "Config": {"Tty": False}})
        if path.endswith("/wait"):
            return wait
        if "/logs" in path:
            return logs
        return _reply(404, {"message": "no such thing"})
    return answer


async def test_an_engine_cut_off_mid_wait_is_unreachable_not_a_defect(tmp_path: Path) -> None:
    whole = _reply(200, {"StatusCode": 0})
    async with engine(tmp_path, _engine_answering(whole)) as url, \
            DockerRuntime.lazy(url) as rt:
        assert await rt.wait(NAME, 5) == Outcome(exit_code=0)  # the control: a whole answer
    cut = _cut(orjson.dumps({"StatusCode": 0, "Error": None}))
    async with engine(tmp_path, _engine_answering(cut)) as url, \
            DockerRuntime.lazy(url) as rt:
        with pytest.raises(EngineUnreachable) as raised:
            await rt.wait(NAME, 5)
    assert isinstance(raised.value.__cause__, aiohttp.ClientPayloadError)
    verdict = faults.of_error(raised.value)
    assert verdict.retryable and verdict == faults.CATEGORIES["engine_unreachable"]
    # What the chaos run met: aiohttp's error itself, had the runtime let it through, is no
    # failure the rule knows to pass (the launcher would call it its own defect).
    assert not faults.transient(raised.value.__cause__)


async def test_an_engine_cut_off_mid_logs_is_unreachable(tmp_path: Path) -> None:
    cut = _cut(b"\x01\x00\x00\x00\x00\x00\x00\x40" + b"x" * 64)
    async with engine(tmp_path, _engine_answering(None, cut)) as url, \
            DockerRuntime.lazy(url) as rt:
        with pytest.raises(EngineUnreachable):
            await rt.logs(NAME)
    # aiodocker leaves the cut answer's connection to the garbage collector (its error path
    # releases nothing), which warns when it collects it: here, not in a later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


async def test_an_engine_that_never_answers_is_given_up_at_the_deadline(
        tmp_path: Path) -> None:
    """It takes the connection and says nothing: each call ends at the runtime's deadline,
    as the engine unreachable. The control: without that deadline passing, the call is
    still waiting (the deadline, not the server, is what ends it)."""
    async with engine(tmp_path, _silent) as url:
        async with DockerRuntime.lazy(url, deadline=0.5) as rt:
            began = time.monotonic()
            with pytest.raises(EngineUnreachable):
                await rt.wait(NAME, 0.1)
            assert time.monotonic() - began < 10
            with pytest.raises(EngineUnreachable):
                await rt.kill(NAME)
        async with DockerRuntime.lazy(url, deadline=60) as rt:
            with anyio.move_on_after(1.5) as still_waiting:
                await rt.wait(NAME, 0.1)
            assert still_waiting.cancelled_caught


async def test_an_engine_error_is_a_refusal_or_unreachable_by_its_status(
        tmp_path: Path) -> None:
    async def failing(status: int) -> Answer:
        async def answer(method: str, path: str) -> bytes | None:
            return _reply(status, {"message": "engine says no"})
        return answer

    async with engine(tmp_path, await failing(500)) as url, DockerRuntime.lazy(url) as rt:
        with pytest.raises(EngineUnreachable):
            await rt.names()
    async with engine(tmp_path, await failing(400)) as url, DockerRuntime.lazy(url) as rt:
        with pytest.raises(EngineRefused) as refused:
            await rt.names()
    assert faults.of_error(refused.value).kind == "refusal"


async def test_a_run_whose_engine_is_cut_off_fails_engine_unreachable(tmp_path: Path) -> None:
    """The launcher's attempt loop, given what the runtime raises: the run fails as
    engine_unreachable once the engine wait is over. The control: aiohttp's error as it
    came before the runtime said it in the rule's words fails the run as launcher_defect."""
    cut = _cut(orjson.dumps({"StatusCode": 0, "Error": None}))

    async def outcome(attempt: Callable[[], Awaitable[object]]) -> list[str | None]:
        failed: list[str | None] = []

        async def fail(exc: BaseException, category: str | None) -> None:
            failed.append(category)

        async def once() -> None:
            await attempt()

        await run_attempts.carry_out(uuid.uuid4(), once, contextlib.nullcontext(), fail,
                                     lambda: 0.0)
        return failed

    async with engine(tmp_path, _engine_answering(cut)) as url, DockerRuntime.lazy(url) as rt:
        assert await outcome(lambda: rt.wait(NAME, 5)) == ["engine_unreachable"]

    async def raw() -> None:
        raise aiohttp.ClientPayloadError("Response payload is not completed")

    assert await outcome(raw) == ["launcher_defect"]


async def _silent(method: str, path: str) -> bytes | None:
    await anyio.sleep_forever()
    return None


@pytest.mark.timeout(600)
async def test_a_launcher_whose_engine_never_answers_holds_no_slot(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher with one slot, an engine that takes every connection and never answers,
    and a local run queued behind the engine's: the engine's run gives its slot back at each
    call's deadline (the local run completes) and fails engine_unreachable once the engine
    wait is over. The control: with a deadline longer than the test, the same launcher is
    stuck on the engine and the local run never starts."""
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT)
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="silent", tag="test", runtime="docker",
        image="props-test-silent:1", digest="sha256:" + "2" * 64))

    async def served(deadline: float, seconds: float) -> list[catalog.RunFinished | None]:
        """The engine's run and the local run, each finished (or None) after `seconds`."""
        silent_ids = await request(store, "silent")
        local_ids = await request(store, "quick")
        done: dict[uuid.UUID, catalog.RunFinished] = {}
        async with engine(tmp_path, _silent) as url, \
                DockerRuntime.lazy(url, deadline=deadline) as silent:
            launcher = Launcher(store, [LocalRuntime(tmp_path / "c", trust_commands=True),
                                        silent], tmp_path / "work", max_concurrent=1,
                                engine_wait=5.0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(ReactorHost(store, launcher, poll_interval=0.1).run)
                with anyio.move_on_after(seconds):
                    done = await finished(store, [*silent_ids, *local_ids], seconds=seconds)
                tg.cancel_scope.cancel()
        return [done.get(silent_ids[0]), done.get(local_ids[0])]

    # The control first: nothing finished, the local run included (no slot came back).
    assert await served(deadline=3600, seconds=15) == [None, None]
    silent_run, local_run = await served(deadline=0.5, seconds=300)
    assert local_run is not None and local_run.status == "completed"
    assert silent_run is not None and silent_run.failure is not None
    assert (silent_run.failure.category, silent_run.failure.retryable) == \
        ("engine_unreachable", True)

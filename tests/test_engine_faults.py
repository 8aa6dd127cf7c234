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

import aiodocker
import aiohttp
import anyio
import anyio.abc
import orjson
import pytest
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from props.core.domain import catalog, definitions
from props.core.log import faults
from props.core.log.store import EventStore
from props.reactors.host import ReactorHost
from props.reactors.launcher import agent_roles, run_attempts
from props.reactors.launcher.launcher import Launcher
from props.reactors.runtimes.container_runtime import (
    LABEL,
    ContainerSpec,
    EngineRefused,
    EngineUnreachable,
    Outcome,
    StartCut,
)
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.conftest import once_per_ci
from tests.reactor_helpers import (
    QUICK_AGENT,
    eventually,
    finished,
    push_code,
    request,
    sync_samples,
)

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
            # Every other call a run's attempt, watch, clean-up and the sweep make: each
            # bounded by the deadline too (a launcher whose engine is gone hangs on none).
            spec = ContainerSpec(name=NAME, image="props-test-silent:1", command=["true"])
            calls: dict[str, Callable[[], Awaitable[object]]] = {
                "start": lambda: rt.start(spec), "logs": lambda: rt.logs(NAME),
                "remove": lambda: rt.remove(NAME), "names": rt.names,
                "has_image": lambda: rt.has_image("props-test-silent:1")}
            for what, call in calls.items():
                began = time.monotonic()
                with pytest.raises(EngineUnreachable):
                    await call()
                assert time.monotonic() - began < 10, what
        async with DockerRuntime.lazy(url, deadline=60) as rt:
            with anyio.move_on_after(1.5) as still_waiting:
                await rt.wait(NAME, 0.1)
            assert still_waiting.cancelled_caught


async def test_an_engine_gone_fails_each_call_at_once(tmp_path: Path) -> None:
    """No socket at all (the engine's host gone, as chaos's engine-gone leaves it): every
    call a run's attempt and clean-up make is EngineUnreachable at once. A removal waited
    60 s for a removal in progress that nobody was making, holding the run's slot: chaos's
    doomed launcher, two slots, stalled behind its finished local runs' clean-ups."""
    async with DockerRuntime.lazy(f"unix://{tmp_path / 'gone.sock'}") as rt:
        spec = ContainerSpec(name=NAME, image="props-test-gone:1", command=["true"])
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "start": lambda: rt.start(spec), "wait": lambda: rt.wait(NAME, 5),
            "kill": lambda: rt.kill(NAME), "logs": lambda: rt.logs(NAME),
            "remove": lambda: rt.remove(NAME), "names": rt.names}
        for what, call in calls.items():
            began = time.monotonic()
            with pytest.raises(EngineUnreachable):
                await call()
            assert time.monotonic() - began < 5, what


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


# -- a real aiohttp server as the engine: Docker answers `wait` chunked ------------------------

@contextlib.asynccontextmanager
async def aiohttp_engine(tmp_path: Path, going: str) -> AsyncIterator[str]:
    """An engine served by aiohttp on a Unix socket whose container has exited; its `wait`
    answer goes the way `going` says: `whole` (the control), `mid-chunk` (headers and one
    chunk of the JSON sent, chunked as dockerd sends it, then the connection cut with no
    last chunk: the engine gone while the launcher reads), `before-headers` (the request
    read, the connection closed: the engine gone before it answered), `garbled` (a chunk
    that breaks off malformed, as a dying engine's or proxy's last bytes may)."""
    path = tmp_path / f"aio-{uuid.uuid4().hex[:8]}.sock"

    async def inspect(request: web.Request) -> web.Response:
        return web.json_response({"Id": "c0ffee", "Name": f"/{NAME}", "State": STATE,
                                  "Config": {"Tty": False}})

    async def wait(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        if going == "before-headers":
            transport.close()
            await anyio.sleep_forever()
        answer = web.StreamResponse(headers={"Content-Type": "application/json"})
        answer.enable_chunked_encoding()
        await answer.prepare(request)
        body = orjson.dumps({"StatusCode": 0, "Error": None})
        if going == "whole":
            await answer.write(body)
            await answer.write_eof()
            return answer
        if going == "garbled":  # a chunk whose size line is no number, then the end
            transport.write(b"zz\r\n" + body + b"\r\n")
        else:
            await answer.write(body[: len(body) // 2])
        transport.close()  # (no terminating chunk: the body is never complete)
        await anyio.sleep_forever()
        return answer

    app = web.Application()
    app.router.add_get("/{version}/containers/{name}/json", inspect)
    app.router.add_post("/{version}/containers/{name}/wait", wait)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    try:
        await web.UnixSite(runner, str(path)).start()
        yield f"unix://{path}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("going", ["mid-chunk", "before-headers", "garbled"])
async def test_a_real_engine_gone_mid_chunked_wait_fails_the_run_engine_unreachable(
        tmp_path: Path, going: str) -> None:
    """What the long chaos run of 12-06 met, on a real aiohttp server: `container.wait()`
    reading a chunked answer whose engine goes away. The runtime says EngineUnreachable and
    the launcher's attempt loop fails the run engine_unreachable, never launcher_defect.
    The control: the same server answering whole gives the outcome."""
    async with aiohttp_engine(tmp_path, "whole") as url, DockerRuntime.lazy(url) as rt:
        assert await rt.wait(NAME, 5) == Outcome(exit_code=0)
    async with aiohttp_engine(tmp_path, going) as url, DockerRuntime.lazy(url) as rt:
        with pytest.raises(EngineUnreachable) as raised:
            await rt.wait(NAME, 5)
        cause = raised.value.__cause__
        assert isinstance(cause, aiohttp.ClientError | aiodocker.DockerError
                          | HttpProcessingError), repr(cause)
        if going == "mid-chunk":  # the very error of the chaos run
            assert isinstance(cause, aiohttp.ClientPayloadError), repr(cause)
        failed: list[str | None] = []

        async def fail(exc: BaseException, category: str | None) -> None:
            failed.append(category)

        async def attempt() -> None:
            await rt.wait(NAME, 5)

        await run_attempts.carry_out(uuid.uuid4(), attempt, contextlib.nullcontext(), fail,
                                     lambda: 0.0)
    assert failed == ["engine_unreachable"]
    with warnings.catch_warnings():  # (a cut answer's connection, collected here)
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


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


# -- a start a restart of the engine cut ------------------------------------------------------

def _engine_refusing_start(message: str) -> Answer:
    """An engine whose container exists, never started, and whose start fails 500 with
    `message`: dockerd 20.10 after a restart cut a start of it says "task ... already
    exists" to every later start."""
    async def answer(method: str, path: str) -> bytes | None:
        if path.endswith("/json"):
            return _reply(200, {"Id": "c0ffee", "Name": f"/{NAME}", "State": {
                "Status": "created", "ExitCode": 0, "OOMKilled": False}})
        if path.endswith("/start"):
            return _reply(500, {"message": message})
        return _reply(404, {"message": "no such thing"})
    return answer


async def test_a_start_the_engine_s_restart_cut_is_told_apart(tmp_path: Path) -> None:
    """The runtime says StartCut (a refusal: the same start is refused for ever) for that
    answer. The control: any other 500 of a start is the engine unreachable, as before."""
    spec = ContainerSpec(name=NAME, image="props-test-x:1", command=["true"])
    cut = "failed to create task for container: task c0ffee: already exists: unknown"
    async with engine(tmp_path, _engine_refusing_start(cut)) as url, \
            DockerRuntime.lazy(url) as rt:
        with pytest.raises(StartCut) as refused:
            await rt.start(spec)
    assert faults.of_error(refused.value).kind == "refusal"
    async with engine(tmp_path, _engine_refusing_start("containerd is busy")) as url, \
            DockerRuntime.lazy(url) as rt:
        with pytest.raises(EngineUnreachable):
            await rt.start(spec)


class _CutOnce(LocalRuntime):
    """Local processes whose first start of each container is cut as dockerd's restart cuts
    it; with `ran_first`, the first start's container runs (until its agent has recorded
    something) before the engine says so: a start that did happen."""

    def __init__(self, root: Path, store: EventStore, ran_first: bool) -> None:
        super().__init__(root, trust_commands=True)
        self.store, self.ran_first = store, ran_first
        self.cut: set[str] = set()
        self.removed: list[str] = []

    async def start(self, spec: ContainerSpec) -> str:
        if spec.name in self.cut:
            return await super().start(spec)
        self.cut.add(spec.name)
        if self.ran_first:
            await super().start(spec)
            run_id = uuid.UUID(spec.labels[LABEL])
            await eventually(lambda: _recorded(self.store, run_id), seconds=120)
        raise StartCut(f"the engine refuses to start {spec.name}: task: already exists")

    async def remove(self, name: str) -> None:
        self.removed.append(name)
        await super().remove(name)


async def _recorded(store: EventStore, run_id: uuid.UUID) -> bool:
    found = await agent_roles.binding(store, run_id)
    return found is not None and found.events > 0


@pytest.mark.parametrize("ran_first", [False, True])
async def test_a_cut_start_is_made_again_only_if_the_agent_recorded_nothing(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        ran_first: bool) -> None:
    """Its container removed, then started anew: the run completes, one container launched
    (seed 9 of the engine-restart chaos run, 12-06: the run waited out the engine wait on
    a healthy engine and failed engine_unreachable). The control: where the cut start did
    run (the agent recorded events), the run fails run_lost (retryable), never run twice."""
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT)
    rt = _CutOnce(tmp_path / "c", store, ran_first)
    [run_id] = await request(store, "quick")
    launcher = Launcher(store, [rt], tmp_path / "work", max_concurrent=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(ReactorHost(store, launcher, poll_interval=0.1).run)
        done = await finished(store, [run_id])
        tg.cancel_scope.cancel()
    run = done[run_id]
    assert len(rt.removed) >= 1 and rt.removed[0].endswith(str(run_id))
    if ran_first:
        assert run.failure is not None and \
            (run.failure.category, run.failure.retryable) == ("run_lost", True)
        assert launcher.stats.launched == 0
    else:
        assert (run.status, run.failure) == ("completed", None)
        assert launcher.stats.launched == 1

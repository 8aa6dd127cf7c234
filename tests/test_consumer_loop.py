"""The consumer loop the reactors and the projection runner share: it follows the log,
commits, parks what cannot be handled and stops within the service's deadline, the same way
for both. Each check has its negative control beside it: the same loop without the poison
parks nothing, a longer deadline holds the stop longer, a failure that is not transient is
parked instead of retried. And the pieces around it: one classifier of failures, every
shield the Stop's, the service's runner built with its Stop."""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import anyio.abc
import asyncpg
import pytest

from props.core.domain import consumer_loop, parking
from props.core.log import errors, faults, leadership, retries, stopping
from props.core.log.checkpoints import Checkpoint
from props.core.log.events import Event, RecordedEvent
from props.core.log.store import EventStore
from props.reactors.service import Service
from tests.reactor_helpers import eventually

ROOT = Path(__file__).resolve().parents[1]


class _Consumer:
    """A consumer of phase events that fails as it is told: `fail(rec, try)` raises or not."""

    decode = None

    def __init__(self, store: EventStore, fail: Callable[[RecordedEvent, int], None],
                 take_seconds: float = 0.0) -> None:
        name = f"loop-test-{uuid.uuid4().hex[:8]}"
        self.store, self.fail, self.take_seconds = store, fail, take_seconds
        self.what, self.parks_as, self.lock = f"consumer {name}", name, leadership.reactor(name)
        self.checkpoint = f"test:{name}"
        self.position = Checkpoint(0, 0)
        self.tries: dict[int, int] = {}
        self.taken: list[int] = []

    async def begin(self, tg: anyio.abc.TaskGroup) -> Checkpoint:
        self.position = await self.store.load_checkpoint(self.checkpoint)
        return self.position

    def handler(self, rec: RecordedEvent) -> consumer_loop.Handler | None:
        return self.take if rec.type_name == "phase.completed" else None

    async def take(self, rec: RecordedEvent) -> None:
        n = self.tries[rec.global_position] = self.tries.get(rec.global_position, 0) + 1
        if self.take_seconds:
            await anyio.sleep(self.take_seconds)
        self.fail(rec, n)
        self.taken.append(rec.global_position)

    async def commit(self, batch: Sequence[RecordedEvent], upto: Checkpoint) -> None:
        await self.store.save_checkpoint(self.checkpoint, self.position, upto)
        self.position = upto


async def _events(store: EventStore, new_event: Callable[..., Event], n: int) -> list[int]:
    await store.append("run-loop", [new_event(phase=f"p{i}") for i in range(n)])
    return [r.global_position for r in await store.read_stream("run-loop")]


async def _serve_until_done(store: EventStore, c: _Consumer, last: int) -> consumer_loop.Loop:
    loop = consumer_loop.Loop(store, c, stop=stopping.Stop(), poll_interval=0.05,
                              batch_size=2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, name="test-consumer-loop")
        await eventually(lambda: c.position.position >= last, 60)
        tg.cancel_scope.cancel()
    return loop


@pytest.mark.parametrize("poisoned", [True, False])
async def test_a_poison_event_is_parked_and_the_others_go_on(
        store: EventStore, new_event: Callable[..., Event], poisoned: bool) -> None:
    """The third event fails whatever the try: parked (once, with its error) after the
    poison policy's tries, and the events after it are still taken and committed. The
    control: the same events without the poison park nothing."""
    positions = await _events(store, new_event, 5)
    poison = positions[2]

    def fail(rec: RecordedEvent, _: int) -> None:
        if poisoned and rec.global_position == poison:
            raise ValueError("cannot handle this one")

    c = _Consumer(store, fail)
    loop = await _serve_until_done(store, c, positions[-1])
    parked = await parking.parked(store, c.parks_as)
    if poisoned:
        assert c.taken == [p for p in positions if p != poison]
        assert [p.global_position for p in parked.values()] == [poison]
        assert next(iter(parked.values())).error_type == "ValueError"
        assert c.tries[poison] == retries.POISON.attempts
        assert (loop.stats.handled, loop.stats.parked) == (4, 1)
    else:
        assert c.taken == positions and parked == {}
        assert (loop.stats.handled, loop.stats.parked) == (5, 0)


@pytest.mark.parametrize("failure", [ConnectionRefusedError, ValueError])
async def test_a_transient_failure_is_retried_and_never_parked(
        store: EventStore, new_event: Callable[..., Event],
        failure: type[Exception]) -> None:
    """Each event fails on its first four tries, then passes. A transient failure (the
    database away) is retried until it passes: every event taken, none parked. The control:
    the same failing a way no retry mends (a defect) is parked after the poison policy's
    tries, which four failures outlast."""
    positions = await _events(store, new_event, 2)

    def fail(rec: RecordedEvent, n: int) -> None:
        if n <= 4:
            raise failure("not this time")

    c = _Consumer(store, fail)
    loop = await _serve_until_done(store, c, positions[-1])
    parked = await parking.parked(store, c.parks_as)
    if failure is ConnectionRefusedError:
        assert c.taken == positions and parked == {}
        assert loop.stats.retries == 8 and loop.stats.parked == 0
    else:
        assert c.taken == [] and len(parked) == 2 and loop.stats.parked == 2


@pytest.mark.parametrize("deadline", [0.5, 2.5])
async def test_a_stop_ends_by_its_deadline_and_leaves_the_event_to_come_again(
        store: EventStore, new_event: Callable[..., Event], deadline: float) -> None:
    """The event in hand takes a minute; it is shielded from the stop, but only until the
    stop's deadline: the stop ends then, names the event, and its checkpoint stays before
    it. The control: a longer deadline holds the stop that much longer (the shield held)."""
    [position] = await _events(store, new_event, 1)
    c = _Consumer(store, lambda *_: None, take_seconds=60)
    stop = stopping.Stop(deadline)
    loop = consumer_loop.Loop(store, c, stop=stop, poll_interval=0.05, batch_size=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, name="test-consumer-loop")
        await eventually(lambda: position in c.tries, 30)
        began = anyio.current_time()
        stop.begin()
        tg.cancel_scope.cancel()
    took = anyio.current_time() - began
    assert deadline - 0.1 <= took < deadline + 2, took
    assert [what for what in stop.left if f"event {position}" in what], stop.left
    assert (await store.load_checkpoint(c.checkpoint)).position < position


async def test_a_stop_lets_the_event_in_hand_finish_and_records_it(
        store: EventStore, new_event: Callable[..., Event]) -> None:
    """Within the deadline the event in hand finishes and is committed: nothing left."""
    [position] = await _events(store, new_event, 1)
    c = _Consumer(store, lambda *_: None, take_seconds=0.5)
    stop = stopping.Stop(10)
    loop = consumer_loop.Loop(store, c, stop=stop, poll_interval=0.05, batch_size=10)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run, name="test-consumer-loop")
        await eventually(lambda: position in c.tries, 30)
        stop.begin()
        tg.cancel_scope.cancel()
    assert c.taken == [position] and stop.left == []
    assert (await store.load_checkpoint(c.checkpoint)).position == position


def _group(*excs: Exception) -> ExceptionGroup[Exception]:
    return ExceptionGroup("tasks", list(excs))


@pytest.mark.parametrize(("exc", "kind"), [
    (ConnectionRefusedError("away"), "transient"),
    (errors.StoreUnavailable("away"), "transient"),
    (asyncpg.SerializationError("40001"), "transient"),
    (_group(ConnectionResetError(), errors.Busy("busy")), "transient"),
    (errors.PropsError("no"), "refusal"),  # the controls: what no retry mends
    (errors.CheckpointConflict("moved"), "refusal"),
    (asyncpg.UniqueViolationError("23505"), "refusal"),
    (ValueError("bug"), "defect"),
    (_group(ConnectionResetError(), ValueError()), "defect"),
    (_group(ConnectionResetError(), errors.PropsError()), "refusal"),
])
def test_one_classifier_of_failures(exc: BaseException, kind: str) -> None:
    assert faults.kind(exc) == kind


def test_an_engine_error_is_what_the_runtime_says_it_is() -> None:
    """The runtimes say their engine's errors in the rule's words; the rule knows no
    engine's exceptions (the control: aiodocker's own error, had one escaped a runtime, is
    not guessed transient)."""
    import aiodocker

    from props.reactors.runtimes.container_runtime import EngineRefused, EngineUnreachable

    assert faults.kind(EngineUnreachable("gone")) == "transient"
    assert faults.of_error(EngineUnreachable("gone")).why == \
        faults.CATEGORIES["engine_unreachable"].why
    assert faults.kind(EngineRefused("no such image")) == "refusal"
    assert faults.kind(aiodocker.DockerError(500, "restarting")) == "defect"


def _bare_shields(files: Sequence[Path]) -> list[str]:
    """`CancelScope(shield=True)` outside the Stop: a shield that ignores --stop-seconds."""
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "CancelScope" \
                    and any(k.arg == "shield" for k in node.keywords):
                found.append(f"{f.relative_to(f.parents[1])}:{node.lineno}")
    return found


def test_every_shield_is_the_stops(tmp_path: Path) -> None:
    files = [p for d in ("core", "projections", "reactors", "tools") for p in
             (ROOT / d).rglob("*.py") if p != ROOT / "core" / "log" / "stopping.py"]
    assert _bare_shields(files) == []
    (tmp_path / "x").mkdir()  # the control: a bare shield is found
    bad = tmp_path / "x" / "bad.py"
    bad.write_text("import anyio\nwith anyio.CancelScope(shield=True):\n    pass\n")
    assert _bare_shields([bad]) == ["x/bad.py:2"]


async def test_a_shield_answers_to_the_current_stop() -> None:
    """Inside `as_current()` a shield anywhere ends by that stop's deadline; outside it, a
    shield answers to another stop (the control)."""
    stop = stopping.Stop(0.2)
    with stop.as_current():
        assert stopping.current() is stop
        stop.begin()
        began = anyio.current_time()
        with anyio.CancelScope() as outer:
            outer.cancel()
            with stopping.shield("a close") as held:
                await anyio.sleep(5)
        assert held.abandoned and anyio.current_time() - began < 2
        assert stop.left == ["a close"]
    assert stopping.current() is not stop


async def test_the_service_builds_its_runner_with_its_stop(store: EventStore) -> None:
    stop = stopping.Stop(3)
    service = Service(store, [], only=["projections", "grader"], stop=stop)
    assert service.runner is not None and service.runner.loop.stop is stop
    assert all(h.loop.stop is stop for h in service.hosts)


def _never_to_be_called(source: str) -> list[str]:
    """Methods whose whole body is a raise: a method of the Protocol that must not be
    called, or a flag that says which half of the Protocol a consumer honours."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                body = [s for s in getattr(item, "body", [])
                        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and \
                        len(body) == 1 and isinstance(body[0], ast.Raise):
                    found.append(f"{node.name}.{item.name}")
                if isinstance(item, ast.Assign | ast.AnnAssign) and "takes_events" in \
                        ast.unparse(item):
                    found.append(f"{node.name}.takes_events")
    return found


def test_one_protocol_every_consumer_honours_whole() -> None:
    """The reactors' host and the projection runner are one kind of consumer: each answers
    every method of the Protocol, none says which half it honours."""
    from props.projections import engine
    from props.reactors import host

    members = {m for m in vars(consumer_loop.Consumer) if not m.startswith("_")}
    assert {"handler", "begin", "commit"} <= members
    assert not members & {"takes_events", "wants", "take"}
    for module in (engine, host, consumer_loop):
        assert _never_to_be_called(Path(str(module.__file__)).read_text()) == []
    # The control: the runner's old answers are found.
    old = ("class Runner:\n    takes_events = False\n"
           "    async def take(self, rec):\n        raise AssertionError('batches only')\n")
    assert _never_to_be_called(old) == ["Runner.takes_events", "Runner.take"]

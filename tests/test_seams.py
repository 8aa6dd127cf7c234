"""The open seams: a runtime and a scorer added by registration alone (nothing of props
edited), each used end to end: a run on the new runtime, a re-score with the new scorer.

Negative controls: the registry refuses a name the log cannot carry; a rule built on the
overlap rule's class but registered without SQL is graded by its own Python (on the old
`isinstance` choice it was graded by the overlap SQL, which this test's run shows as grades
that are not the rule's: see test_a_rule_is_graded_by_what_it_registered)."""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pydantic
import pytest

from props.core.domain import catalog, definitions
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import rescoring, scorers, server_grading
from props.core.scoring.matches import Match
from props.core.scoring.released import overlap
from props.reactors import service
from props.reactors.runtimes import runtime_contract, runtime_registry
from props.reactors.runtimes.container_runtime import (
    ContainerRuntime,
    ContainerSpec,
    Mount,
    Outcome,
    Reach,
)
from tests.conftest import rebuilt
from tests.reactor_helpers import QUICK_AGENT, finished, request, serving, sync_samples


class InProcessRuntime:
    """Containers as child processes this process watches, known by name in memory: the
    smallest runtime that passes the contract (a restart forgets everything it ran)."""

    kind = "inproc"

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self.tg = tg
        self.held: dict[str, tuple[ContainerSpec, anyio.abc.Process | None]] = {}
        self.output: dict[str, bytearray] = {}
        self.ended: dict[str, Outcome] = {}
        self.done: dict[str, anyio.Event] = {}

    async def prepare(self, spec: ContainerSpec, run_dir: Path, reach: Reach) -> ContainerSpec:
        return dataclasses.replace(spec, env={**spec.env, "PROPS_AGENT_DSN": reach.host_dsn(),
                                              "HOME": str(run_dir)})

    async def start(self, spec: ContainerSpec) -> str:
        if spec.name in self.held:
            return spec.name
        self.held[spec.name] = (spec, None)
        self.output[spec.name], self.done[spec.name] = bytearray(), anyio.Event()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **spec.env}
        process = await anyio.open_process(spec.command, env=env, stdin=None,
                                           stderr=-2)  # STDOUT: one stream, as logs are
        self.held[spec.name] = (spec, process)
        self.tg.start_soon(self._watch, spec.name, process)
        return spec.name

    async def _watch(self, name: str, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        async for chunk in process.stdout:
            self.output[name] += chunk
        code = await process.wait()
        self.ended[name] = Outcome(code if code >= 0 else None)
        self.done[name].set()

    async def wait(self, name: str, within: float | None) -> Outcome | None:
        with anyio.move_on_after(within):
            await self.done[name].wait()
        return self.ended.get(name)

    async def kill(self, name: str) -> None:
        process = self.held.get(name, (None, None))[1]
        if process is not None and name not in self.ended:
            process.kill()

    async def logs(self, name: str) -> bytes:
        return bytes(self.output.get(name, b""))

    async def remove(self, name: str) -> None:
        if name in self.held:
            await self.kill(name)
            if name in self.done:
                await self.done[name].wait()
            self.held.pop(name, None)
            self.output.pop(name, None)

    async def names(self, label: str = "props.run") -> dict[str, str]:
        return {name: spec.labels[label] for name, (spec, _) in self.held.items()
                if label in spec.labels}

    def visible_path(self, mount: Mount) -> str:
        return mount.host

    def capacity(self) -> int:
        return 4


@asynccontextmanager
async def open_inproc(options: runtime_registry.Options,
                      required: bool) -> AsyncIterator[ContainerRuntime | None]:
    async with anyio.create_task_group() as tg:
        yield InProcessRuntime(tg)
        tg.cancel_scope.cancel()


INPROC = runtime_registry.Registration("inproc", open_inproc)  # what an entry point would name


@pytest.fixture
def inproc() -> Any:
    runtime_registry.register(INPROC.name, INPROC.open)
    yield INPROC
    runtime_registry.unregister(INPROC.name)


class TestInProcessRuntime(runtime_contract.RuntimeContract):
    """The contract a third party runs on its runtime, run on this test's."""

    isolates_files = False
    oom_may_go_unreported = True  # no memory limit at all: the allocation succeeds

    @asynccontextmanager
    async def _open(self, tmp_path: Path) -> AsyncIterator[ContainerRuntime]:
        async with open_inproc(runtime_registry.Options(tmp_path), True) as rt:
            assert rt is not None
            yield rt

    def make_runtime(self, tmp_path: Path) -> Any:
        return self._open(tmp_path)

    async def test_memory_limit_is_enforced_and_reported(self, made: Any) -> None:
        pytest.skip("NORUN: the in-process runtime of this test sets no memory limit")


async def test_a_run_on_a_runtime_added_by_registration(
        store: EventStore, inproc: runtime_registry.Registration, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    command = [sys.executable, "-c", QUICK_AGENT]
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="on-inproc", tag="test", runtime="inproc",
        image="inproc:quick", command=command, config={"issues": 2},
        digest=definitions.local_digest(command, {"issues": 2})))
    async with service.container_runtimes("inproc") as opened:
        assert sorted(rt.kind for rt in opened) == ["inproc", "local"]
        async with serving(store, opened):
            [run_id] = await request(store, "on-inproc")
            done = await finished(store, [run_id])
    assert done[run_id].status == "completed", done[run_id]
    started = [r.event for r in await store.read_stream(f"run-{run_id}")
               if isinstance(r.event, catalog.ContainerStarted)]
    assert [e.runtime for e in started] == ["inproc"]
    issues = [r.event for r in await store.read_stream(f"run-{run_id}")
              if isinstance(r.event, catalog.IssueReported)]
    assert len(issues) == 2


def test_a_name_the_log_cannot_carry_is_refused() -> None:
    for bad in ("Kube", "k8s/pods", "x" * 33, "", "-dash"):
        with pytest.raises(runtime_registry.InvalidRuntime):
            runtime_registry.register(bad, open_inproc)
    with pytest.raises(runtime_registry.UnknownRuntime):
        runtime_registry.get("nowhere")
    with pytest.raises(runtime_registry.InvalidRuntime):
        runtime_registry.register("local", open_inproc)  # taken by a bundled one


def test_a_runtime_is_found_through_its_entry_point(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed package's `[project.entry-points."props.runtimes"]`, as pip writes it."""
    dist = tmp_path / "props_inproc-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: props-inproc\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{runtime_registry.GROUP}]\ninproc = tests.test_seams:INPROC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(runtime_registry, "_entry_points_loaded", False)
    try:
        assert "inproc" in runtime_registry.names()
        assert runtime_registry.get("inproc") == INPROC
    finally:
        runtime_registry.unregister("inproc")


def test_old_events_with_the_literal_kinds_still_read() -> None:
    for kind in ("docker", "local"):
        e = catalog.ContainerStarted.model_validate(
            {"run_id": str(uuid.uuid4()), "runtime": kind, "container_name": "c",
             "container_id": "c"})
        assert e.runtime == kind
    with pytest.raises(pydantic.ValidationError):
        catalog.ContainerStarted.model_validate(
            {"run_id": str(uuid.uuid4()), "runtime": "Not A Name", "container_name": "c",
             "container_id": "c"})


# -- scorers ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FirstDefect(overlap.OverlapScorer):
    """Built on the overlap rule's class, but every issue is a find of the first TP: what
    the overlap SQL would never say of issues that lie elsewhere."""

    name: str = "first-defect"

    def match_run(self, issues: dict[str, list[catalog.Location]],
                  gt: catalog.GroundTruth) -> dict[str, Match]:
        first = gt.true_positives[0].id
        return {i: Match(tp_id=first, tp_occurrence=1, grade=1.0) for i in issues}


@pytest.fixture
def first_defect() -> Any:
    rule = scorers.register(FirstDefect(version=1, tolerance=0))
    yield rule
    scorers.unregister(rule)


async def test_a_rule_is_graded_by_what_it_registered(
        store: EventStore, first_defect: scorers.LocationRule, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs recorded on the local runtime, re-scored by a rule added by registration: its
    grades are its Python rule's (registered without SQL), not the overlap SQL's."""
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    command = [sys.executable, "-c", QUICK_AGENT]
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="quick", tag="test", runtime="local", image="local:quick",
        command=command, config={"issues": 3}, digest=definitions.local_digest(command,
                                                                            {"issues": 3})))
    async with service.container_runtimes("local", trust_local_commands=True) as opened, \
            serving(store, opened):
        run_ids = await request(store, "quick", count=2)
        await finished(store, run_ids)
    await rebuilt(store)  # re-scoring selects from the projections
    assert scorers.scorer("first-defect@1") is first_defect
    assert not server_grading.grades_on_server(first_defect)
    report = await rescoring.rescore(store, first_defect, rescoring.Selection(everything=True))
    assert report.graded_runs == 2 and report.grades == 6 and report.accounted, report
    await rebuilt(store)
    found = await store.pool.fetch(
        "SELECT tp_id FROM projections.grading_edges WHERE scorer_name = 'first-defect'")
    tps = {r["tp_id"] for r in found}
    assert len(found) == 6 and len(tps) == 1 and None not in tps, found


def test_a_rule_registered_with_sql_grades_on_the_server() -> None:
    wide = overlap.OverlapScorer(version=1, tolerance=10, name="wide-overlap")
    assert not server_grading.grades_on_server(wide)  # not registered: Python
    scorers.register(wide, sql_tolerance=10)
    try:
        assert server_grading.grades_on_server(wide)
        assert scorers.sql_tolerance(wide) == 10
        with pytest.raises(errors.ConfigurationError):  # one rule per name and version
            scorers.register(overlap.OverlapScorer(version=1, tolerance=11,
                                                   name="wide-overlap"))
    finally:
        scorers.unregister(wide)
    assert scorers.sql_tolerance(overlap.V2) == 3 and scorers.sql_tolerance(
        scorers.SCORERS["tiered@2"]) is None

"""An engine that goes away for good stops its own runs and nobody else's: each of its runs
fails after the launcher's engine wait as engine_unreachable (retryable), giving back its
slot while it waits, and the runs on other runtimes finish as if nothing happened. No
deadline of the wall clock: the test waits for the runs' finish events."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from props.core.domain import catalog, definitions
from props.core.log.store import EventStore
from props.reactors.host import ReactorHost
from props.reactors.launcher.launcher import Launcher
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.conftest import once_per_ci
from tests.reactor_helpers import QUICK_AGENT, finished, push_code, request, sync_samples

pytestmark = once_per_ci  # what it checks does not depend on the server's kind


@pytest.mark.timeout(900)
async def test_an_engine_gone_for_good_fails_its_runs_and_no_other(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT)
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="gone", tag="test", runtime="docker",
        image="props-test-gone:1", digest="sha256:" + "1" * 64))
    gone_ids = await request(store, "gone", count=6)
    local_ids = await request(store, "quick", count=6)
    # An engine endpoint nobody answers at (no shared engine is touched).
    async with DockerRuntime.lazy(f"unix://{tmp_path / 'no-engine.sock'}") as gone:
        # The engine's runs were requested first and the launcher has two slots: had a run
        # waiting for the engine kept its slot, the local runs would wait behind them until
        # the engine wait ran out. It does not run out while the local runs go (an hour: no
        # guess at how long six runs take on a loaded machine), then it is cut to nothing.
        launcher = Launcher(store, [LocalRuntime(tmp_path / "c", trust_commands=True), gone],
                            tmp_path / "work", max_concurrent=2, engine_wait=3600.0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ReactorHost(store, launcher, poll_interval=0.1).run)
            done = await finished(store, local_ids, seconds=600)
            waiting = [r for r in gone_ids if await _finish(store, r) is not None]
            launcher.engine_wait = 0.0
            done |= await finished(store, gone_ids, seconds=600)
            tg.cancel_scope.cancel()
    assert waiting == []  # every engine run still waited when the last local run finished
    assert {done[r].status for r in local_ids} == {"completed"}
    for run_id in gone_ids:
        failure = done[run_id].failure
        assert failure is not None and (failure.category, failure.retryable) == \
            ("engine_unreachable", True), done[run_id]


async def _finish(store: EventStore, run_id: uuid.UUID) -> catalog.RunFinished | None:
    return next((rec.event for rec in await store.read_stream(f"run-{run_id}")
                 if isinstance(rec.event, catalog.RunFinished)), None)

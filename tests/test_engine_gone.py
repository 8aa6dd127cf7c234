"""An engine that goes away for good stops its own runs and nobody else's: each of its runs
fails after the launcher's engine wait as engine_unreachable (retryable), giving back its
slot while it waits, and the runs on other runtimes finish as if nothing happened."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from props.core.domain import catalog, definitions
from props.core.log.store import EventStore
from props.reactors.docker_runtime import DockerRuntime
from props.reactors.host import ReactorHost
from props.reactors.launcher import Launcher
from props.reactors.local_runtime import LocalRuntime
from tests.reactor_helpers import QUICK_AGENT, push_code, request, sync_samples
from tests.test_launchers import served_until_finished


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
        launcher = Launcher(store, [LocalRuntime(tmp_path / "c", trust_commands=True), gone],
                            tmp_path / "work", max_concurrent=2, engine_wait=5.0)
        began = time.monotonic()
        done = await served_until_finished(
            store, [ReactorHost(store, launcher, poll_interval=0.1)], gone_ids + local_ids)
    assert {done[r].status for r in local_ids} == {"completed"}
    for run_id in gone_ids:
        failure = done[run_id].failure
        assert failure is not None and (failure.category, failure.retryable) == \
            ("engine_unreachable", True), done[run_id]
    # The engine's runs were requested first and the launcher has two slots: had a run
    # waiting for the engine kept its slot, the local runs would have waited behind them.
    # They all finished before the first of the engine's runs gave up.
    finished_at = {r: rec.recorded_at for r in gone_ids + local_ids
                   for rec in await store.read_stream(f"run-{r}")
                   if isinstance(rec.event, catalog.RunFinished)}
    assert max(finished_at[r] for r in local_ids) < min(finished_at[r] for r in gone_ids)
    assert time.monotonic() - began < 60

"""Baseline critics: the real analyzers through the launcher, graded and in the report."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from props.core.domain import baselines, catalog, definitions, streams
from props.core.log.store import EventStore
from props.projections import figures
from props.reactors import docker_runtime
from props.reactors.agents import baseline_critic
from props.reactors.docker_runtime import DockerRuntime
from tests.reactor_helpers import eventually, finished, serving, sync_samples

SAMPLES = ("csvtool/2025-09-03-00", "logparse/2025-11-02-00", "notes-api/2025-10-14-00")


async def _request(store: EventStore, definition: catalog.DefinitionPushed) -> list[uuid.UUID]:
    await definitions.push(store, definition)
    ids = []
    for slug in SAMPLES:
        run_id = uuid.uuid4()
        await store.append(streams.run(run_id), [catalog.RunRequested(
            run_id=run_id, agent_type="critic", definition=definition.name,
            definition_ref=definition.tag, example=catalog.Example(snapshot=slug),
            model=f"{definition.name}-model", timeout_seconds=120, budget_usd=0)])
        ids.append(run_id)
    return ids


async def _issues(store: EventStore, run_id: uuid.UUID) -> list[catalog.IssueReported]:
    return [r.event for r in await store.read_stream(streams.run(run_id))
            if isinstance(r.event, catalog.IssueReported)]


async def _graded(store: EventStore, run_ids: list[uuid.UUID], issues: int) -> None:
    """Until the projections hold every run and issue, and no issue waits for a grade (a
    run with no issue has no edge to wait for)."""
    async def done() -> bool:
        if await store.pool.fetchval("SELECT to_regclass('projections.grading_pending')") \
                is None:
            return False
        row = await store.pool.fetchrow(
            "SELECT (SELECT count(*) FROM projections.agent_runs WHERE run_id = ANY($1) "
            "        AND status = 'completed') AS runs,"
            "       (SELECT count(*) FROM projections.reported_issues "
            "         WHERE run_id = ANY($1)) AS issues,"
            "       (SELECT count(*) FROM projections.grading_pending "
            "         WHERE run_id = ANY($1)) AS pending", run_ids)
        return bool(row is not None and (row["runs"], row["issues"], row["pending"])
                    == (len(run_ids), issues, 0))
    await eventually(done, 60)


@pytest.mark.parametrize("tool", sorted(baselines.RULES))
async def test_each_baseline_reports_its_findings_graded_and_in_the_report(
        served: EventStore, tool: str) -> None:
    store = served
    definition = baselines.local(tool)
    assert definition.config["version"] and definition.config["rules"]
    ids = await _request(store, definition)
    done = await finished(store, ids, 180)
    assert {r.status for r in done.values()} == {"completed"}, done
    issues = [i for run_id in ids for i in await _issues(store, run_id)]
    assert issues, f"{tool} found nothing in three samples with seeded defects"
    assert all(i.rationale.startswith("[") and "] " in i.rationale for i in issues)
    files = {f.path for slug in SAMPLES
             for f in (await _snapshot(store, slug)).files}
    assert all(loc.file in files for i in issues for loc in i.locations)
    await _graded(store, ids, len(issues))
    records, _evidence = await figures.load(store, None, None)
    assert any(r["definition"] == definition.name for r in records)


async def _snapshot(store: EventStore, slug: str) -> catalog.SnapshotSynced:
    [synced] = [r.event for r in await store.read_stream(f"snapshot-{slug}")
                if isinstance(r.event, catalog.SnapshotSynced)]
    return synced


async def test_a_baseline_pushed_for_another_version_fails_its_runs(served: EventStore) -> None:
    """The definition names the tool's version; a machine with another one must not report
    under that name: the run ends failed, exit code 3, a closed fact."""
    store = served
    real = baselines.local("ruff")
    stale = real.model_copy(update={"tag": "stale", "config": {**real.config,
                                                               "version": "0.0.1"},
                                    "digest": "sha256:" + "0" * 64})
    ids = await _request(store, stale)
    done = await finished(store, ids[:1], 120)
    [run] = done.values()
    assert run.status == "failed" and run.failure is not None
    assert (run.failure.category, run.failure.exit_code) == ("exit_nonzero", 3)
    assert await _issues(store, ids[0]) == []


def test_findings_outside_the_examples_files_are_dropped_and_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text("import os\n")
    found, dropped = baseline_critic.review("ruff", tmp_path, ["a.py"])
    assert [(f.path, f.rule) for f in found] == [("a.py", "F401")] and dropped == 0
    real = baseline_critic.TOOLS["ruff"]
    outside = baseline_critic.Finding("../elsewhere.py", 1, 1, "F401", "x", "high")
    monkeypatch.setitem(baseline_critic.TOOLS, "ruff", baseline_critic.Tool(
        real.arguments, lambda doc: [*real.findings(doc), outside], real.ok_exits))
    found, dropped = baseline_critic.review("ruff", tmp_path, ["a.py"])
    assert len(found) == 1 and dropped == 1


@pytest.mark.docker
async def test_a_baseline_runs_in_docker(store: EventStore, docker: DockerRuntime,
                                         tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    definition = await docker_runtime.build_baseline_image(docker, "ruff")
    assert definition.runtime == "docker" and definition.host_python
    again = await docker_runtime.build_baseline_image(docker, "ruff")
    assert again.digest == definition.digest  # the same tool, rules and image: one digest
    async with serving(store, [docker]):
        ids = await _request(store, definition)
        done = await finished(store, ids, 240)
    assert {r.status for r in done.values()} == {"completed"}, done
    assert [i for run_id in ids for i in await _issues(store, run_id)]

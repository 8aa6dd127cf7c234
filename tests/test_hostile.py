"""A hostile critic runs beside honest ones: it breaches nothing, fails alone, and the service
never stops (issue: agents cannot read the answer key, forge the record or stop the service).

The hostile agent (props.tools.checks.hostile_critic) logs in as every other role, reads
every table of the answer key and the log, takes advisory locks and large objects, reports under the
launcher's ids and holds a transaction open with its timeouts SET away; then it reports an
event the catalog refuses. Its own log line lists what worked: nothing may have.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from props.core.domain import baselines, catalog, definitions, endpoints
from props.core.log import server_checks
from props.core.log.store import EventStore
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.tools.checks import hostile_critic
from tests.conftest import docker_or_skip, podman_or_skip
from tests.reactor_helpers import (
    QUICK_AGENT,
    eventually,
    finished,
    push_code,
    request,
    serving,
    sync_samples,
    sync_specimen,
)

HOSTILE = "from props.tools.checks.hostile_critic import main; main()"
SHADOWING = "shadow/2026-12-01-00"


async def sync_shadowing_specimen(store: EventStore, folder: Path, marker: Path) -> None:
    """A snapshot whose files would replace each baseline's tool (`ruff/__main__.py`, ...)
    and hook the interpreter (`sitecustomize.py`, a `.pth`), each writing `marker` if run."""
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    files = {"app.py": "import os\nprint(eval(os.environ.get('X', '1')))\n",
             "sitecustomize.py": payload, "usercustomize.py": payload,
             "evil.pth": "import os; " + payload}
    for tool in ("ruff", "bandit", "pylint"):
        files[f"{tool}/__init__.py"] = files[f"{tool}/__main__.py"] = payload
    await sync_specimen(store, folder, SHADOWING, files, ("app.py", 2),
                        rationale="eval of the environment")


async def hostile_report(store: EventStore, run_id: uuid.UUID) -> dict[str, object]:
    exited = [r.event for r in await store.read_stream(f"run-{run_id}")
              if isinstance(r.event, catalog.ContainerExited)]
    assert exited and exited[0].logs_sha256, "the hostile agent left no logs"
    logs = await store.get_blob(exited[0].logs_sha256)
    found = hostile_critic.report_in(logs)
    assert found is not None, logs.decode()[-2000:]
    return found


async def run_beside_honest(store: EventStore, runtimes: list[ContainerRuntime],
                            honest: int, scratch: Path) -> None:
    """Beside the honest runs: the hostile critic; a definition naming the service's
    connection string for its key (PROPS_SERVICE_DSN is set here, as `props serve` has it);
    each baseline on a snapshot that shadows its tool."""
    await sync_samples(store)
    marker = scratch / "shadowed"
    await sync_shadowing_specimen(store, scratch / "specimens", marker)
    await push_code(store, "quick", QUICK_AGENT)
    with pytest.raises(endpoints.EndpointRefused):  # no key variable enters a definition
        await push_code(store, "takes-the-dsn", QUICK_AGENT,
                        config={"api_key_env": "PROPS_SERVICE_DSN"})
    honest_ids = await request(store, "quick", count=honest, timeout_seconds=120)
    hostile_ids = await request(store, "hostile", timeout_seconds=120)
    shadowed = []
    for tool in sorted(baselines.RULES):
        definition = baselines.local(tool)
        await definitions.push(store, definition)
        run_id = uuid.uuid4()
        await store.append(f"run-{run_id}", [catalog.RunRequested(
            run_id=run_id, agent_type="critic", definition=definition.name,
            definition_ref=definition.tag, example=catalog.Example(snapshot=SHADOWING),
            model=tool, timeout_seconds=120, budget_usd=0)])
        shadowed.append(run_id)
    async with serving(store, runtimes):  # a reactor that stopped would raise here
        done = await finished(store, [*honest_ids, *hostile_ids, *shadowed],
                              seconds=240)

        async def all_graded() -> bool:
            for run_id in honest_ids:
                if len([r for r in await store.read_stream(f"grading-{run_id}-tiered@2")
                        if not isinstance(r.event, catalog.GradesChance)]) != 2:
                    return False
            return True

        await eventually(all_graded, 120)
    assert {done[r].status for r in honest_ids} == {"completed"}
    assert not marker.exists(), marker.read_text()  # no specimen code ran in a baseline
    assert {done[r].status for r in shadowed} == {"completed"}, [done[r] for r in shadowed]
    for run_id in shadowed:  # the real tools reviewed the snapshot: app.py's eval is found
        files = {loc.file for r in await store.read_stream(f"run-{run_id}")
                 if isinstance(r.event, catalog.IssueReported) for loc in r.event.locations}
        assert "app.py" in files, run_id
    verdict = done[hostile_ids[0]]
    assert verdict.status == "failed" and verdict.failure is not None
    assert (verdict.failure.phase, verdict.failure.category) == ("report", "malformed_event")
    report = await hostile_report(store, hostile_ids[0])
    breaches = [str(b) for b in report["breaches"]]  # type: ignore[attr-defined]
    async with store.pool.acquire() as conn:
        trusted = await server_checks.trust_rules(conn)
        warned = await server_checks.warnings(conn)
    if trusted:
        # A server of the user's that trusts connections (PROPS_TEST_DSN on a trust
        # cluster): logins are its rules, and `props db status` names them; nothing else.
        assert breaches and {b.split(" as ")[0] for b in breaches} == {"login"}, breaches
        assert any("trusts" in w for w in warned)
    else:
        assert breaches == [], breaches
    assert int(str(report["tried"])) > 30, report
    # Reported under the launcher's id of its own finish, it did not finish the run early:
    types = [r.type_name for r in await store.read_stream(f"run-{hostile_ids[0]}")]
    assert types.count("run.finished") == 1 and types[-1] == "run.finished"
    assert "phase.completed" in types


@pytest.mark.slow
async def test_a_hostile_local_agent_beside_20_honest_runs(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PROPS_SERVICE_DSN", store.dsn)
    await push_code(store, "hostile", HOSTILE)
    await run_beside_honest(store, [LocalRuntime(tmp_path / "c", trust_commands=True)],
                            honest=20, scratch=tmp_path)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["docker", "podman"])
async def test_a_hostile_agent_in_a_container_beside_honest_runs(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        engine: str) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PROPS_SERVICE_DSN", store.dsn)
    reach = docker_or_skip if engine == "docker" else podman_or_skip
    async with reach() as runtime:
        image = await docker_runtime.build_reference_image(runtime)
        hostile = catalog.DefinitionPushed(**{
            **image.model_dump(), "name": "hostile",
            "command": hostile_critic.command()})
        await definitions.push(store, hostile)
        local = LocalRuntime(tmp_path / "c", trust_commands=True)
        await run_beside_honest(store, [local, runtime], honest=5, scratch=tmp_path)


async def test_an_error_handling_one_run_fails_that_run_only(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused append while draining one run's reports (what an id collision used to do)
    fails that run with a closed fact; the launcher goes on with the others."""
    from props.core.log import errors
    from props.reactors.launcher import agent_roles

    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    await push_code(store, "quick", QUICK_AGENT)
    ids = await request(store, "quick", count=4, timeout_seconds=60)
    doomed = ids[0]
    drain = agent_roles.drain

    async def refusing(store_: EventStore, run_id: uuid.UUID, *args: object,
                       **kwargs: object) -> agent_roles.Drained:
        if run_id == doomed:
            raise errors.DuplicateEventConflict("an id collision (injected)")
        return await drain(store_, run_id, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(agent_roles, "drain", refusing)
    async with serving(store, [LocalRuntime(tmp_path / "c", trust_commands=True)]):
        done = await finished(store, ids)
    assert done[doomed].status == "failed" and done[doomed].failure is not None
    assert (done[doomed].failure.phase,  # type: ignore[union-attr]
            done[doomed].failure.category) == (  # type: ignore[union-attr]
        "report", "duplicate_event_conflict")
    assert {done[r].status for r in ids[1:]} == {"completed"}

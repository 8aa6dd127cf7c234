"""Baseline critics: the real analyzers through the launcher, graded and in the report."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from props.core.domain import baselines, catalog, definitions, streams
from props.core.log.store import EventStore
from props.projections import figures
from props.reactors.agents import baseline_critic
from props.reactors.agents.baseline_confinement import Confinement
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.docker_runtime import DockerRuntime
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


# -- a baseline on this machine runs far from props' files (issue 43, item 2) --------------

_FIXTURES = Path(__file__).parent / "fixtures" / "hostile"
_PASSWORD = "owner-password-4f9c"
_AS_PROPS_WITH_BRAIN_GI = Confinement(user=None, guard_imports=False, tool_imports_off=False)
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root can change user")


def _gi_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """The probe's reproduction: PROPS_HOME with the owner's password in credentials.json
    (as props writes it), and a snapshot whose `gi` reads it when astroid's brain_gi imports
    it, then writes pylint's JSON with what it read."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    credentials = home / "credentials.json"
    credentials.write_text(json.dumps({"postgres": _PASSWORD}))
    credentials.chmod(0o600)
    monkeypatch.setenv("PROPS_HOME", str(home))
    root = tmp_path / "example"
    shutil.copytree(_FIXTURES / "gi_credentials", root)
    gi = root / "gi" / "__init__.py"
    gi.write_text(gi.read_text().replace("__CREDENTIALS__", str(credentials)))
    return root, ["app.py", "gi/__init__.py"]


def _what_the_specimen_saw(found: list[baseline_critic.Finding]) -> dict[str, object]:
    [said] = [f.message for f in found if f.rule.startswith("E9999")]
    return dict(json.loads(said))


@root_only
def test_the_gi_specimen_runs_as_nobody_and_cannot_read_the_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the import guard off (so the specimen does run: the user is the layer under
    test), the specimen runs as nobody, without groups or PROPS_HOME, in a copy only root
    and nogroup can read, and its read of credentials.json fails."""
    root, files = _gi_credentials(tmp_path, monkeypatch)
    found, _ = baseline_critic.review("pylint", root, files,
                                      Confinement(guard_imports=False, tool_imports_off=False))
    saw = _what_the_specimen_saw(found)
    nobody = pwd.getpwnam("nobody")
    assert saw == {"read": "PermissionError", "uid": nobody.pw_uid, "groups": [],
                   "props_home": None, "folder": f"0o750 0:{nobody.pw_gid}"}
    assert not any(_PASSWORD in f.message for f in found)


def test_negative_control_without_the_user_drop_the_baseline_finds_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run as props' own user (root here): the specimen reads the owner's password
    and the baseline reports it, as in the probe."""
    root, files = _gi_credentials(tmp_path, monkeypatch)
    found, _ = baseline_critic.review("pylint", root, files,
                                      _AS_PROPS_WITH_BRAIN_GI)
    saw = _what_the_specimen_saw(found)
    assert _PASSWORD in str(saw["read"]) and saw["uid"] == os.getuid()


def test_brain_gi_off_alone_keeps_the_specimen_from_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As props' own user and without the import guard, brain_gi unregistered is enough:
    the specimen never runs (its control: the test above, with brain_gi left on)."""
    root, files = _gi_credentials(tmp_path, monkeypatch)
    found, _ = baseline_critic.review("pylint", root, files,
                                      Confinement(user=None, guard_imports=False))
    assert not [f for f in found if f.rule.startswith("E9999")]
    assert not any(_PASSWORD in f.message for f in found)


def test_with_every_layer_on_the_gi_specimen_never_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default: the guard and the disabled brain_gi keep the specimen from running at
    all; pylint reviews the example (as nobody when root)."""
    root, files = _gi_credentials(tmp_path, monkeypatch)
    found, _ = baseline_critic.review("pylint", root, files)
    assert not [f for f in found if f.rule.startswith("E9999")]
    assert ("gi/__init__.py", "W0718 broad-exception-caught") not in {
        (f.path, f.rule) for f in found}  # (pylint's own findings only; none required)


def test_a_symbolic_link_out_of_the_example_is_never_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("import os\n")
    root = tmp_path / "example"
    root.mkdir()
    (root / "a.py").write_text("import sys\n")
    (root / "leak.py").symlink_to(outside)
    found, _ = baseline_critic.review("ruff", root, ["a.py", "leak.py", "../outside.py"])
    assert {(f.path, f.rule) for f in found} == {("a.py", "F401")}
    # Control: the tool itself follows the link (what the filter keeps it from).
    done = subprocess.run([sys.executable, "-I", "-m", "ruff", "check", "--isolated",
                           "--no-cache", "--output-format", "json", "--exit-zero",
                           "--select", "F", str(root / "leak.py")], capture_output=True,
                          text=True, check=True, cwd=os.sep)
    assert [f["code"] for f in json.loads(done.stdout)] == ["F401"]


# The example's pragmas: quiet.py silences each tool its own way (ruff's file-wide noqa,
# bandit's nosec, pylint's skip-file and disable); each baseline still reports what they
# would hide, and each tool run without props' settings is silenced (the control).
_QUIET = {"ruff": "F821", "bandit": "B602", "pylint": "E0602 undefined-variable"}
_PLAIN = {
    "ruff": ["ruff", "check", "--isolated", "--no-cache", "--output-format", "json",
             "--exit-zero", "--select", "F"],
    "bandit": ["bandit", "-f", "json", "-q"],
    "pylint": ["pylint", "--output-format=json", "--rcfile=/dev/null", "--disable=all",
               "--enable=E0602"],
}


@pytest.mark.parametrize("tool", sorted(_QUIET))
def test_the_examples_pragmas_are_ignored(tmp_path: Path, tool: str) -> None:
    root = tmp_path / "example"
    shutil.copytree(_FIXTURES / "gi_specimen", root)
    found, _ = baseline_critic.review(tool, root, ["quiet.py"])
    assert ("quiet.py", _QUIET[tool]) in {(f.path, f.rule) for f in found}, found


@pytest.mark.parametrize("tool", sorted(_QUIET))
def test_negative_control_the_pragmas_silence_each_plain_tool(tmp_path: Path,
                                                              tool: str) -> None:
    root = tmp_path / "example"
    shutil.copytree(_FIXTURES / "gi_specimen", root)
    done = subprocess.run([sys.executable, "-I", "-m", *_PLAIN[tool], str(root / "quiet.py")],
                          capture_output=True, text=True, check=False, cwd=os.sep)
    found = baseline_critic.TOOLS[tool].findings(json.loads(done.stdout))
    assert _QUIET[tool] not in {f.rule for f in found}, found

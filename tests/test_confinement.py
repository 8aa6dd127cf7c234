"""Nothing a definition or a specimen carries reaches beyond its run.

No variable of the launcher's environment reaches a run: a definition names a registered
model endpoint, never a URL or a key variable (the gateway holds the key, tests/
test_gateway.py); a specimen's files never run inside a
baseline critic (its tool shadowed by `ruff/__main__.py`, `sitecustomize.py`, a `.pth`); the
local runtime runs only props' own agents unless the operator trusts the commands.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from props.core.domain import catalog, definitions, endpoints
from props.core.log import errors
from props.core.log.store import EventStore
from props.reactors.agents import baseline_critic
from props.reactors.agents.baseline_confinement import Confinement
from props.reactors.runtimes import local_runtime
from props.reactors.runtimes.container_runtime import ContainerSpec
from props.tools.command_line import service_config
from tests.reactor_helpers import QUICK_AGENT, push_code

SERVICE_DSN = "postgresql://props_service:s3cret-service-password@/props?host=/tmp"


def test_a_config_names_an_endpoint_never_a_url_or_a_key() -> None:
    """What decides where a model is and which key pays for it is the operator's: a
    definition's config naming a URL or a key variable is refused where it enters."""
    refused: list[dict[str, Any]] = [
        {"base_url": "http://127.0.0.1:9/v1"}, {"api_key_env": "OPENAI_API_KEY"},
        {"proxy": "https://evil.example/v1"}, {"API_KEY": "sk-x"},
        {"endpoint": "Not A Name"}, {"endpoint": ["openai"]},
        # the probe's ways past a top-level, one-spelling check
        {"baseUrl": "x"}, {"apiKey": "x"}, {"api-key": "x"}, {"key": "x"},
        {"llm": {"base_url": "x"}}, {"urls": ["http://x"]}, {"mirror": "//host/v1"},
        {"\uff35\uff32\uff2c": "x"}]
    for config in refused:
        with pytest.raises(endpoints.EndpointRefused):
            endpoints.check_config(config)
    # The negative control: a config that names an endpoint and tunes the critic is fine.
    endpoints.check_config({"endpoint": "openai", "mode": "per-file", "context_tokens": 2048,
                            "max_answer_tokens": 512})


async def test_an_endpoint_never_takes_its_key_from_what_props_reads(store: EventStore) -> None:
    for variable in ["PROPS_SERVICE_DSN", "PGPASSWORD", "DATABASE_URL"]:
        with pytest.raises(endpoints.EndpointRefused):
            await endpoints.register(store, catalog.EndpointRegistered(
                name="x", base_url="http://127.0.0.1:9/v1", key_env=variable))
    assert await endpoints.registered(store) == []  # nothing written on refusal
    await endpoints.register(store, catalog.EndpointRegistered(
        name="x", base_url="http://127.0.0.1:9/v1", key_env="OPENAI_API_KEY"))
    assert [e.name for e in await endpoints.registered(store)] == ["x"]


def _settings(**given: object) -> service_config.ServiceConfig:
    args = argparse.Namespace(config=None, **given)
    return service_config.load(args)


def test_the_service_settings_refuse_unsafe_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROPS_CONFIG_FILE", raising=False)
    with pytest.raises(errors.ConfigurationError, match="props endpoints add"):
        _settings(agent_env=["OPENAI_API_KEY"])  # gone: no variable reaches a run
    with pytest.raises(errors.ConfigurationError, match="unsafe_agent_network"):
        _settings(agent_network="host")
    assert _settings(agent_network="host", unsafe_agent_network=True).agent_network == "host"
    assert _settings().agent_sslmode == "require"  # an agent's password never in the clear


async def test_a_definition_naming_the_service_dsn_is_refused_at_push(
        store: EventStore) -> None:
    """The attack of old (a config naming PROPS_SERVICE_DSN as its key variable) no longer
    reaches a launcher: the push is refused and nothing is recorded."""
    with pytest.raises(endpoints.EndpointRefused):
        await push_code(store, "leaky", QUICK_AGENT, config={"api_key_env": "PROPS_SERVICE_DSN"})
    assert await definitions.all_pushed(store, "critic") == []


# -- a specimen cannot run its own code inside a baseline ---------------------------------

def _hostile_example(root: Path, marker: Path) -> list[str]:
    """An example whose files would each write `marker` if Python ever ran them."""
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    files = {"app.py": "import os\nprint(eval(os.environ.get('X', '1')))\n"}
    for tool in ("ruff", "bandit", "pylint"):
        files[f"{tool}/__init__.py"] = payload
        files[f"{tool}/__main__.py"] = payload
    files["sitecustomize.py"] = payload
    files["usercustomize.py"] = payload
    files["evil.pth"] = "import os; " + payload
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return sorted(p for p in files if p.endswith(".py"))


@pytest.mark.parametrize("tool", ["ruff", "bandit", "pylint"])
def test_a_baseline_never_runs_the_examples_code(tmp_path: Path, tool: str) -> None:
    root, marker = tmp_path / "example", tmp_path / "ran"
    root.mkdir()
    files = _hostile_example(root, marker)
    # As props' own user: the guard alone (as nobody, the marker's folder is out of reach).
    findings, _dropped = baseline_critic.review(tool, root, files, Confinement(user=None))
    assert not marker.exists(), marker.read_text()
    assert any(f.path == "app.py" for f in findings)  # the real tool reviewed the example


_GI_SPECIMEN = Path(__file__).parent / "fixtures" / "hostile" / "gi_specimen"


def _copy_gi_specimen(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    root, marker = tmp_path / "example", tmp_path / "ran"
    shutil.copytree(_GI_SPECIMEN, root)
    return root, marker, sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))


def test_pylint_never_imports_the_examples_modules(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's critical reproduction: a snapshot's `gi/__init__.py` and a file calling
    `gi.require_version()`. astroid's brain_gi imports `gi` from the example's folder, which
    pylint put on its path: the baseline refuses to import anything from outside its startup
    path, so the specimen never runs (and pylint still reviews it)."""
    root, marker, files = _copy_gi_specimen(tmp_path)
    monkeypatch.setenv("PROPS_HOSTILE_MARKER", str(marker))  # (the tool's env drops it)
    # The guard alone: props' own user, brain_gi left on.
    findings, _ = baseline_critic.review("pylint", root, files,
                                         Confinement(user=None, tool_imports_off=False))
    assert not marker.exists() and not (root / "gi" / "RAN").exists()
    assert ("app.py", 4) in {(f.path, f.start) for f in findings}


def test_negative_control_plain_pylint_imports_the_specimen(tmp_path: Path) -> None:
    """pylint run as the baseline ran it before the guard (isolated, from /, the same
    options) imports the specimen's `gi`: the check above can fail."""
    root, _, files = _copy_gi_specimen(tmp_path)
    subprocess.run([sys.executable, "-I", "-m", "pylint", "--output-format=json",
                    "--rcfile=/dev/null", "--disable=all", "--enable=E,W",
                    *(str(root / f) for f in files)], cwd=os.sep, capture_output=True,
                   check=False, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert (root / "gi" / "RAN").exists()


@pytest.mark.parametrize(("tool", "rule"), [("ruff", "F821"), ("bandit", "B602"),
                                            ("pylint", "E0602 undefined-variable")])
def test_the_examples_pragmas_do_not_silence_a_baseline(tmp_path: Path, tool: str,
                                                        rule: str) -> None:
    """`# ruff: noqa`, `# noqa`, `# nosec`, `# pylint: skip-file` and `disable=` in the
    example are ignored: each tool still reports what the file's pragmas would hide."""
    root, _, files = _copy_gi_specimen(tmp_path)
    findings, _ = baseline_critic.review(tool, root, files)
    assert ("quiet.py", rule) in {(f.path, f.rule) for f in findings}, findings


def test_negative_control_the_pragmas_silence_a_plain_ruff(tmp_path: Path) -> None:
    """Without --ignore-noqa, the file-wide `# ruff: noqa` hides quiet.py's F821."""
    root, _, _ = _copy_gi_specimen(tmp_path)
    done = subprocess.run([sys.executable, "-I", "-m", "ruff", "check", "--isolated",
                           "--no-cache", "--output-format", "json", "--exit-zero", "--select",
                           "F", str(root / "quiet.py")], capture_output=True, text=True,
                          check=True, cwd=os.sep)
    assert json.loads(done.stdout) == []


def test_negative_control_the_old_invocation_runs_the_specimen(tmp_path: Path) -> None:
    """The way the baselines were run before (`python -m ruff` in the example's folder)
    runs the specimen's `ruff/__main__.py`: the check above can fail."""
    root, marker = tmp_path / "example", tmp_path / "ran"
    root.mkdir()
    _hostile_example(root, marker)
    subprocess.run([sys.executable, "-m", "ruff", "check", "app.py"], cwd=root,
                   capture_output=True, check=False)
    assert marker.exists()


# -- the local runtime runs only props' own agents by default -----------------------------

async def test_the_local_runtime_refuses_commands_props_does_not_ship(tmp_path: Path) -> None:
    rt = local_runtime.LocalRuntime(tmp_path / "c")
    marker = tmp_path / "ran"
    spec = ContainerSpec(name="props-run-x", image="local:x",
                         command=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                         env={}, mounts=[], labels={}, network=False, network_name=None,
                         cpus=1.0, memory_mb=256)
    with pytest.raises(local_runtime.UntrustedLocalCommand):
        await rt.start(spec)
    assert not marker.exists()
    assert not (tmp_path / "c" / "props-run-x").exists()
    assert local_runtime.ships([sys.executable, "-m", "props.reactors.agents.reference_critic"])
    assert not local_runtime.ships(["/tmp/python", "-m", "props.reactors.agents.x"])
    assert not local_runtime.ships([sys.executable, "-m", "props.x", "--evil"])
    assert not local_runtime.ships([sys.executable, "-m", "os"])

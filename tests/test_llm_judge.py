"""LLM judges re-score history: the model is asked (a loopback OpenAI-compatible server that
judges by overlapping lines), every call is recorded, and compare reports agreement."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from props.core.domain import catalog, definitions
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import comparison, llm_judge, rescoring, scorers, verdicts
from props.projections import engine, figures
from tests.fake_openai import chat_server, completion, judge_question
from tests.reactor_helpers import eventually, finished, register_endpoint, request_reference
from tests.test_strict_recall import graded_run


def _overlap(body: dict[str, Any]) -> str:
    """What the fake model answers a question: the candidate when the issue shares a file
    and a line with it (so it agrees with the overlap scorers, mostly), else none."""
    def lines(item: dict[str, Any]) -> set[tuple[str, int]]:
        return {(loc["file"], n) for loc in item["locations"] for start, end in loc["lines"]
                for n in range(start, end + 1)}

    issue, known = judge_question(body)
    return known["ref"] if lines(issue) & lines(known) else "none"


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    issue, _known = judge_question(body)
    content = json.dumps({"matches": {issue["id"]: _overlap(body)}})
    return {"choices": [{"message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 50}}


@pytest.fixture
def model() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with chat_server(_answer) as served:
        yield served


@pytest.fixture
def judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           model: tuple[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    url, seen = model
    path = tmp_path / "scorers.toml"
    path.write_text(f'["judge@1"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "judge-m"\n'
                    f'api_key_env = "JUDGE_KEY"\nprice_in_per_mtok = 1.0\n'
                    f'price_out_per_mtok = 4.0\n\n'
                    f'["judge@2"]\nkind = "llm-judge"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    f'model = "judge-m"\nrequest_timeout = 5\n')
    monkeypatch.setenv("PROPS_SCORERS_FILE", str(path))
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-KEEP-OUT-OF-THE-LOG")
    return seen


async def test_a_judge_rescores_records_its_calls_and_agrees(
        served: EventStore, judges: list[dict[str, Any]], dsn: str) -> None:
    store = served
    await definitions.push(store, definitions.reference_local())
    run_ids = await request_reference(store, count=2)
    assert {f.status for f in (await finished(store, run_ids)).values()} == {"completed"}

    async def graded(scorer: str) -> bool:
        if await store.pool.fetchval("SELECT to_regclass('projections.grading_edges')") is None:
            return False  # the projection runner has not made its tables yet
        n = await store.pool.fetchval(
            "SELECT count(DISTINCT critique_run_id) FROM projections.grading_edges "
            "WHERE scorer_name || '@' || scorer_version = $1", scorer)
        return bool(n == 2)

    await eventually(lambda: graded("tiered@2"), 60)
    judge = scorers.scorer("judge@1")
    assert isinstance(judge, llm_judge.LlmJudge) and not judge.deterministic

    selection = rescoring.Selection(everything=True)
    report = await rescoring.rescore(store, judge, selection)
    assert (report.selected, report.graded_runs, dict(report.unscorable)) == (2, 2, {})
    assert report.appended == report.grades > 0
    asked_once = len(judges)  # one question per candidate a location rule made
    assert asked_once > 0 and {s["auth"] for s in judges} == {
        "Bearer sk-judge-KEEP-OUT-OF-THE-LOG"}
    recorded = 0
    for run_id in run_ids:
        calls = [r.event for r in await store.read_stream(f"judge-{run_id}-judge@1")]
        recorded += len(calls) // 2
        for asked, answered in zip(calls[::2], calls[1::2], strict=True):
            assert isinstance(asked, catalog.LlmRequested) and asked.model == "judge-m"
            assert isinstance(answered, catalog.LlmResponded)
            assert answered.cost_usd == pytest.approx((1000 * 1.0 + 50 * 4.0) / 1e6)
            assert asked.run_id == answered.run_id == judge.judge_id(run_id) != run_id
            stored = await store.pool.fetchval(
                "SELECT count(*) FROM props.blobs WHERE encode(sha256, 'hex') = ANY ($1)",
                [*asked.message_sha256s, answered.response_sha256])
            assert stored == 3
    assert recorded == asked_once
    logged = await store.pool.fetchval("SELECT string_agg(data::text, ' ') FROM props.events")
    assert "KEEP-OUT" not in logged

    # Again: graded runs are not asked again, nothing is appended.
    again = await rescoring.rescore(store, judge, selection)
    assert (again.graded_runs, again.appended, again.grades) == (2, 0, report.grades)
    assert len(judges) == asked_once

    await eventually(lambda: graded("judge@1"), 60)
    c = await comparison.compare(store, "tiered@2", "judge@1", selection)
    assert len(c.unchanged) + len(c.changed) + len(c.unscorable) == c.selected == 2
    assert not c.unscorable
    assert c.agreement is not None and c.agreement.issues == report.grades
    assert c.agreement.percent is not None and 0 < c.agreement.percent <= 100

    # A judge whose endpoint is down: each run unscorable with the reason, a non-zero exit.
    dead = await rescoring.rescore(store, scorers.scorer("judge@2"), selection)
    assert dead.unscorable == {"scorer error": 2} and dead.graded_runs == 0
    assert all("endpoint failed" in e for e in dead.scorer_errors)
    out = await anyio.run_process([sys.executable, "-m", "props.tools.cli", "rescore",
                                   "--scorer", "judge@2", "--all"], check=False,
                                  env={**os.environ, "PROPS_DSN": dsn})
    assert out.returncode == 1 and b"could not be graded by judge@2" in out.stderr, out.stderr


def test_judge_settings_change_its_code_hash() -> None:
    one = llm_judge.LlmJudge(version=1, model="a", base_url="http://x/v1")
    assert one.code_hash == llm_judge.LlmJudge(version=1, model="a", base_url="http://x/v1").code_hash
    assert one.code_hash != llm_judge.LlmJudge(version=1, model="b",
                                               base_url="http://x/v1").code_hash


def test_judge_answers_are_read_strictly() -> None:
    gt = catalog.GroundTruth(
        true_positives=[catalog.TruePositive(id="t", rationale="r", occurrences=[
            catalog.Occurrence(locations=[catalog.Location(file="a.py", ranges=[
                catalog.LineRange(start=1, end=2)])])])],
        false_positives=[catalog.FalsePositive(id="f", rationale="r", relevant_files=["a.py"],
                                               occurrences=[catalog.Occurrence(locations=[
                                                   catalog.Location(file="a.py")])])],
        file_sets=[], scopes=[])
    issues: dict[str, list[catalog.Location]] = {"i1": [], "i2": [], "i3": [], "i4": [],
                                                 "i5": [], "i6": []}
    got = llm_judge.parse_answer(json.dumps({"matches": {
        "i1": "tp:t#1", "i2": "tp:t#1", "i3": "fp:f", "i4": "tp:nothing#1", "i5": "none"}}),
        issues, gt)
    assert got["i1"] == scorers.Match(tp_id="t", tp_occurrence=1, grade=1.0)
    assert got["i3"] == scorers.Match(fp_id="f")
    assert got["i5"] == scorers.Match()  # "none" is a verdict: matches nothing
    assert got["i2"] == scorers.Match()  # i1 took the occurrence: a duplicate report
    # The rest grade nothing, and say why (never "none").
    assert got["i4"] == "the judge named no known item for this issue"
    assert got["i6"] == "the judge's answer leaves this issue out"
    for bad in ("not json", "[]", '{"matches": []}', '{"other": {}}'):
        assert llm_judge.parse_answer(bad, issues, gt) == dict.fromkeys(issues,
                                                                       llm_judge.NOT_JSON)


def test_the_majority_of_the_draws_decides_or_nothing_does() -> None:
    t, none = scorers.Match(tp_id="t", tp_occurrence=1, grade=1.0), scorers.Match()
    draws: list[dict[str, llm_judge.Verdict]] = [
        {"a": t, "b": t, "c": none, "d": llm_judge.NOT_JSON},
        {"a": t, "b": none, "c": none, "d": llm_judge.NOT_JSON},
        {"a": llm_judge.NOT_JSON, "b": llm_judge.NOT_JSON, "c": t, "d": llm_judge.NOT_JSON}]
    got = llm_judge.majority(draws)
    assert got["a"] == t and got["c"] == none  # two of three
    assert got["b"] == got["d"] == "no majority among the judge's 3 draws"
    assert llm_judge.majority([{"x": llm_judge.NOT_JSON}]) == {"x": llm_judge.NOT_JSON}


def test_sampling_settings_are_sent_and_in_the_code_hash() -> None:
    base = llm_judge.LlmJudge(version=1, model="a", base_url="http://x/v1")
    tuned = llm_judge.from_settings("j@1", {"model": "a", "base_url": "http://x/v1",
                                            "temperature": 0.7, "seed": 11, "max_tokens": 300,
                                            "draws": 3})
    body = tuned.request_body([{"role": "user", "content": "x"}])
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.7, 11, 300)
    assert "seed" not in base.request_body([]) and "max_tokens" not in base.request_body([])
    hashes = {base.code_hash, tuned.code_hash}
    for change in ({"temperature": 0.5}, {"seed": 1}, {"max_tokens": 10}, {"draws": 5}):
        hashes.add(dataclasses.replace(base, **change).code_hash)
    assert len(hashes) == 6
    with pytest.raises(errors.ConfigurationError):
        llm_judge.LlmJudge(version=1, model="a", base_url="http://x/v1", draws=0)


# Three draws of a model asked about the candidates of tests.test_strict_recall's run (i1 at
# T1; i2 near both T1 and T2; i3 and i4 at no defect: never asked): sure of i1 and that i2
# is not T1, unsure whether i2 is T2; its third answer is not JSON at all.
DRAWS = {("i1", "tp:T1#1"): ["tp:T1#1", "tp:T1#1", None],
         ("i2", "tp:T1#1"): ["none", "none", None],
         ("i2", "tp:T2#1"): ["tp:T2#1", "none", None]}


def _drawn(body: dict[str, Any]) -> dict[str, Any]:
    issue, known = judge_question(body)
    key = (issue["id"], known["ref"])
    _drawn.calls[key] = _drawn.calls.get(key, 0) + 1  # type: ignore[attr-defined]
    said = DRAWS[key][_drawn.calls[key] - 1]  # type: ignore[attr-defined]
    content = "I think the first one" if said is None else json.dumps(
        {"matches": {issue["id"]: said}})
    return {"choices": [{"message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


async def test_draws_are_recorded_and_an_issue_without_a_majority_is_unscorable(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = await graded_run(store)
    _drawn.calls = {}  # type: ignore[attr-defined]
    with chat_server(_drawn) as (url, seen):
        (tmp_path / "scorers.toml").write_text(
            f'["judge@3"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "m"\n'
            'draws = 3\ntemperature = 0.7\nseed = 11\nmax_tokens = 300\n')
        monkeypatch.setenv("PROPS_SCORERS_FILE", str(tmp_path / "scorers.toml"))
        judge = scorers.scorer("judge@3")
        selection = rescoring.Selection(everything=True)
        report = await rescoring.rescore(store, judge, selection)
        assert len(seen) == 9 and {(b["body"]["temperature"], b["body"]["seed"],
                                    b["body"]["max_tokens"]) for b in seen} == {(0.7, 11, 300)}
        assert (report.graded_runs, report.grades, report.unscorable_issues) == (1, 3, 1)
        again = await rescoring.rescore(store, judge, selection)  # asked once per run
        assert len(seen) == 9 and again.appended == 0
    calls = [r.event for r in await store.read_stream(f"judge-{run}-judge@3")]
    assert [c.request_id for c in calls][::2] == [  # type: ignore[union-attr]
        f"judge-{d}-q{q}" for d in (1, 2, 3) for q in (1, 2, 3)]  # every draw recorded
    verdicts = [r.event for r in await store.read_stream(f"grading-{run}-judge@3")]
    grades = {e.critique_issue_id: e for e in verdicts if isinstance(e, catalog.GradeEmitted)}
    assert set(grades) == {"i1", "i3", "i4"} and grades["i1"].tp_id == "T1"
    [unscorable] = [e for e in verdicts if isinstance(e, catalog.GradesUnscorable)]
    assert [(i.issue_id, i.reason) for i in unscorable.issues] == [
        ("i2", "no majority among the judge's 3 draws")]

    await engine.rebuild(store)
    rows, notes = await figures.load(store, "judge", 3)
    assert rows == []  # a run with an issue it could not grade is not scored by it
    assert (notes["unscorable"], notes["scored"], notes["ungraded"]) == (1, 0, 0)
    edge = await store.pool.fetchrow(
        "SELECT grade, unscorable FROM projections.grading_edges WHERE critique_issue_id = "
        "'i2' AND scorer_name = 'judge'")
    assert edge is not None and edge["grade"] is None and "no majority" in edge["unscorable"]


# Three models of one endpoint (the request names the model), asked about the candidates
# of tests.test_strict_recall's run: two confirm i1 at T1; on i2 one confirms T2, one T1 and
# one neither, so no verdict has a majority.
PANEL = {"a": {("i1", "tp:T1#1"), ("i2", "tp:T2#1")},
         "b": {("i1", "tp:T1#1")},
         "c": {("i2", "tp:T1#1")}}


def _by_model(body: dict[str, Any]) -> dict[str, Any]:
    issue, known = judge_question(body)
    said = known["ref"] if (issue["id"], known["ref"]) in PANEL[body["model"]] else "none"
    content = json.dumps({"matches": {issue["id"]: said}})
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


async def test_a_panel_of_judges_takes_the_majority_and_records_each_judge(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = await graded_run(store)
    with chat_server(_by_model) as (url, seen):
        judges = "".join(f'["{m}@1"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "{m}"\n'
                         for m in PANEL)
        (tmp_path / "scorers.toml").write_text(
            judges + '["panel@1"]\nkind = "llm-panel"\njudges = ["a@1", "b@1", "c@1"]\n')
        monkeypatch.setenv("PROPS_SCORERS_FILE", str(tmp_path / "scorers.toml"))
        panel = scorers.scorer("panel@1")
        assert isinstance(panel, llm_judge.LlmPanel)
        assert panel.code_hash != scorers.scorer("a@1").code_hash
        report = await rescoring.rescore(store, panel, rescoring.Selection(everything=True))
        assert {b["body"]["model"] for b in seen} == {"a", "b", "c"}
    assert (report.grades, report.unscorable_issues) == (3, 1)
    verdicts = [r.event for r in await store.read_stream(f"grading-{run}-panel@1")]
    grades = {e.critique_issue_id: (e.tp_id, e.fp_id) for e in verdicts
              if isinstance(e, catalog.GradeEmitted)}
    # i4 lies on a decoy, which no location rule makes a candidate for a defect: none.
    assert grades == {"i1": ("T1", None), "i3": (None, None), "i4": (None, None)}
    [unscorable] = [e for e in verdicts if isinstance(e, catalog.GradesUnscorable)]
    assert unscorable.issues[0].reason == "no majority among the panel's 3 judges"
    calls = [r.event for r in await store.read_stream(f"judge-{run}-panel@1")]
    assert len(calls) == 18 and len({c.run_id for c in calls}) == 3  # type: ignore[union-attr]


def test_a_panel_names_judges_of_its_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scorers.toml").write_text(
        '["a@1"]\nkind = "llm-judge"\nbase_url = "http://x/v1"\nmodel = "a"\n'
        '["panel@1"]\nkind = "llm-panel"\njudges = ["a@1", "missing@1"]\n')
    monkeypatch.setenv("PROPS_SCORERS_FILE", str(tmp_path / "scorers.toml"))
    with pytest.raises(errors.ConfigurationError, match="judges here: a@1"):
        llm_judge.configured()


def test_scorers_eval_runs_a_judge_on_the_shipped_cases(
        tmp_path: Path, model: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = model
    (tmp_path / "scorers.toml").write_text(
        f'["judge@1"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "judge-m"\n')
    env = {**os.environ, "PROPS_SCORERS_FILE": str(tmp_path / "scorers.toml")}
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "scorers", "eval",
                           "--scorer", "judge@1", "--scorer", "tiered@2", "--json"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    judge, rule = summary["scorers"]
    assert judge["scorer"] == "judge@1" and rule["scorer"] == "tiered@2"
    assert judge["issues"] == rule["issues"] > 60 and len(seen) > 0
    assert sum(judge["confusion"].values()) == judge["issues"]
    assert 0 < judge["accuracy"] <= 1


async def test_what_the_judge_cannot_read_is_unscorable_and_never_agreement(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge whose answers never parse (a small model's free text; one cut at max_tokens):
    each issue unscorable with why, and `compare` puts the run with the unscorable, out of
    the agreement. Negative control of the comparison that counted the judge's empty edges
    as agreeing with tiered's nones (27.3%, kappa 0)."""
    run = await graded_run(store)
    answers = iter([completion("I think the first one")] * 3
                   + [completion('{"matches": {"i1": "tp:T1', finish_reason="length")] * 3)
    with chat_server(lambda body: next(answers)) as (url, seen):
        (tmp_path / "scorers.toml").write_text(
            f'["judge@7"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "m"\n')
        monkeypatch.setenv("PROPS_SCORERS_FILE", str(tmp_path / "scorers.toml"))
        judge = scorers.scorer("judge@7")
        report = await rescoring.rescore(store, judge, rescoring.Selection(everything=True))
        # i1 and i2 have candidates it could not judge; i3 and i4 have none (not asked).
        assert (report.graded_runs, report.grades, report.unscorable_issues) == (1, 2, 2)
        schema = seen[0]["body"]["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["matches"]["required"] == ["i1"]  # the one asked about
        assert schema["properties"]["matches"]["properties"]["i1"]["enum"] == [
            "tp:T1#1", "none"]  # its candidate, or none: never another defect
        await engine.rebuild(store)
        compared = await comparison.compare(store, "tiered@2", "judge@7",
                                            rescoring.Selection(everything=True))
        assert compared.unscorable == {
            run: "judge@7 could not grade an issue: " + llm_judge.NOT_JSON}
        assert not compared.changed and not compared.unchanged and compared.complete
        assert compared.agreement is not None and compared.agreement.issues == 0
        (tmp_path / "scorers.toml").write_text(
            f'["judge@8"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "m"\n')
        cut = await rescoring.rescore(store, scorers.scorer("judge@8"),
                                      rescoring.Selection(everything=True))
    assert cut.unscorable_issues == 2
    [verdicts] = [r.event for r in await store.read_stream(f"grading-{run}-judge@8")
                  if isinstance(r.event, catalog.GradesUnscorable)]
    assert {i.reason for i in verdicts.issues} == {"the judge's answer was cut at max_tokens"}
    answered = [r.event for r in await store.read_stream(f"judge-{run}-judge@8")
                if isinstance(r.event, catalog.LlmResponded)]
    assert {(a.outcome, a.finish_reason) for a in answered} == {("truncated", "length")}


async def test_a_run_without_issues_is_not_judged() -> None:
    """Nothing to judge: the model is not asked (its endpoint here is down: asking would
    raise) and nothing is paid."""
    judge = llm_judge.LlmJudge(version=1, model="m", base_url="http://127.0.0.1:9/v1")
    gt = catalog.GroundTruth(true_positives=[], false_positives=[], file_sets=[], scopes=[])
    said = await verdicts.of(judge).verdicts(None, uuid.uuid4(), {}, {}, gt)
    assert (said.matches, said.unscorable, said.calls) == ({}, {}, [])


async def test_a_judge_asks_the_endpoint_the_operator_registered(
        served: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        model: tuple[str, list[dict[str, Any]]]) -> None:
    """A judge names a registered endpoint (`endpoint = "NAME"`), as a critic does: its URL,
    key and prices are the registration's (the key from this process's environment, never
    the scorers file's); a judge naming one not registered here cannot grade (the control)."""
    url, seen = model
    store = served
    await register_endpoint(store, "judge-ep", url, key_env="JUDGE_EP_KEY",
                            price_in_per_mtok=2.0, price_out_per_mtok=8.0)
    monkeypatch.setenv("JUDGE_EP_KEY", "sk-judge-ep-KEEP-OUT")
    path = tmp_path / "scorers.toml"
    path.write_text('["judge@5"]\nkind = "llm-judge"\nendpoint = "judge-ep"\nmodel = "m"\n\n'
                    '["judge@6"]\nkind = "llm-judge"\nendpoint = "nowhere"\nmodel = "m"\n')
    monkeypatch.setenv("PROPS_SCORERS_FILE", str(path))
    await definitions.push(store, definitions.reference_local())
    run_ids = await request_reference(store, count=1)
    assert {f.status for f in (await finished(store, run_ids)).values()} == {"completed"}

    async def graded() -> bool:  # (the run as the projections have it, graded)
        return bool(await store.pool.fetchval("SELECT to_regclass('projections.grading_edges')")
                    and await store.pool.fetchval(
                        "SELECT count(*) FROM projections.grading_edges"))

    await eventually(graded, 60)
    selection = rescoring.Selection(everything=True)
    judge = scorers.scorer("judge@5")
    assert isinstance(judge, llm_judge.LlmJudge) and judge.settings["endpoint"] == "judge-ep"
    report = await rescoring.rescore(store, judge, selection)
    assert report.graded_runs == 1 and seen
    assert {s["auth"] for s in seen} == {"Bearer sk-judge-ep-KEEP-OUT"}
    answered = [r.event for r in await store.read_stream(f"judge-{run_ids[0]}-judge@5")
                if isinstance(r.event, catalog.LlmResponded)]
    assert answered and {a.cost_usd for a in answered} == {(1000 * 2.0 + 50 * 8.0) / 1e6}
    with pytest.raises(errors.ConfigurationError, match="props endpoints add nowhere"):
        await rescoring.rescore(store, scorers.scorer("judge@6"), selection)
    with pytest.raises(errors.ConfigurationError, match="not both"):
        llm_judge.LlmJudge(version=1, model="m", base_url=url, endpoint_name="judge-ep")

"""A find is a claim about the defect: style findings are never candidates, and a located find
counts as confirmed only once a judge or a person said the issue describes the defect.

A snapshot of our own with one defect, T1 on line 10 of a.py (and T2 on line 30, which
nobody finds). Baseline runs (definition `baseline-ruff`) report on T1's line:
- `style`: only `[E501] Line too long` there: located by the rule alone, never a candidate;
- `both`: E501 and `[F821] Undefined name` on the same line: F821 is the find;
- `crafted` (the negative control): the same E501 rationale from a critic that is not a
  baseline: its category is unknown, so it is a candidate and the rule finds T1.
"""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from props.core.domain import baselines, catalog, streams
from props.core.domain.specimens import specimens
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import (
    candidates,
    grade_ids,
    llm_judge,
    registration,
    rescoring,
    reviews,
    scorers,
)
from props.projections import engine, figures
from props.projections import status as projection_status
from props.tools.command_line import figure_tables
from props.tools.command_line.handlers import scorer_eval
from tests.fake_openai import chat_server, judge_question
from tests.verification_helpers import record_verification

SLUG = "styled/2026-03-01-00"
E501 = "[E501] (style) Line too long (99 > 88)"
F821 = "[F821] (correctness) Undefined name `output_path`"


def loc(line: int) -> list[catalog.Location]:
    return [catalog.Location(file="a.py", ranges=[catalog.LineRange(start=line, end=line)])]


GROUND_TRUTH = catalog.GroundTruth(
    true_positives=[
        catalog.TruePositive(id="T1", rationale="output_path undefined",
                             occurrences=[catalog.Occurrence(locations=loc(10))]),
        catalog.TruePositive(id="T2", rationale="r",
                             occurrences=[catalog.Occurrence(locations=loc(30))])],
    false_positives=[], file_sets=[],
    scopes=[catalog.Scope(files_hash=None, occurrences=["T1#1", "T2#1"])])
GT_HASH = specimens.ground_truth_hash(GROUND_TRUTH)


async def _projected(store: EventStore) -> None:
    """The projections rebuilt until they hold every event: on a server others use too, a
    transaction elsewhere holds the log's fence, and one rebuild may stop short of the end."""
    with anyio.fail_after(120):
        await engine.rebuild(store)
        while any(s.lag_events for s in await projection_status.of(store)):
            await engine.rebuild(store)


def test_each_tool_has_a_table_and_style_is_only_what_it_lists() -> None:
    assert set(baselines.CATEGORIES) == set(baselines.RULES)
    style = [("ruff", "E501"), ("ruff", "E302"), ("ruff", "W291"), ("ruff", "I001"),
             ("ruff", "N802"), ("ruff", "E741"), ("pylint", "C0301"), ("pylint", "W0311")]
    assert all(baselines.category(t, r) == "style" for t, r in style)
    # Rules that can be a defect are never style (the negative controls of the table).
    assert baselines.category("ruff", "F821") == "correctness"
    assert baselines.category("ruff", "E711") == "correctness"  # == None
    assert baselines.category("ruff", "E722") == "correctness"  # bare except
    assert baselines.category("ruff", "W605") == "correctness"  # invalid escape
    assert baselines.category("ruff", "syntax") == "correctness"
    assert baselines.category("ruff", "S602") == "security"
    assert baselines.category("bandit", "B101") == "security"
    assert baselines.category("pylint", "E0602") == "correctness"
    assert baselines.category("pylint", "W0511") == "correctness"  # fixme: may name a bug
    assert baselines.rule_of(E501) == "E501"
    assert baselines.rule_of("[W0311 bad-indentation] Bad indentation") == "W0311"
    assert baselines.rule_of("Line too long [E501]") is None  # only the critic's own prefix
    assert baselines.tool_of("baseline-ruff") == "ruff" and baselines.tool_of("ruff") is None
    assert candidates.never("baseline-ruff", {"a": E501, "b": F821}) == {"a"}
    assert candidates.never("crafted", {"a": E501}) == frozenset()  # not a baseline's


async def _run(store: EventStore, definition: str, issues: dict[str, tuple[str, int]],
               ) -> uuid.UUID:
    run = uuid.uuid4()
    await store.append(streams.run(run), [
        catalog.RunRequested(run_id=run, agent_type="critic", definition=definition,
                             example=catalog.Example(snapshot=SLUG), model=definition,
                             timeout_seconds=60, budget_usd=0),
        *[catalog.IssueReported(run_id=run, issue_id=i, rationale=text, locations=loc(line))
          for i, (text, line) in issues.items()],
        catalog.RunFinished(run_id=run, status="completed")])
    return run


async def _snapshot(store: EventStore) -> None:
    await store.append(f"snapshot-{SLUG}", [catalog.SnapshotSynced(
        slug=SLUG, version=1, source="test", ground_truth=GROUND_TRUTH,
        ground_truth_hash=GT_HASH,
        files=[catalog.FileEntry(path="a.py", sha256="0" * 64, size=1)])])


async def _edges(store: EventStore, run: uuid.UUID, scorer: str) -> dict[str, str | None]:
    name, _, version = scorer.partition("@")
    return {r["critique_issue_id"]: r["tp_id"] for r in await store.pool.fetch(
        "SELECT critique_issue_id, tp_id FROM projections.grading_edges "
        "WHERE critique_run_id = $1 AND scorer_name = $2 AND scorer_version = $3",
        run, name, int(version))}


@pytest.mark.parametrize("scorer", ["tiered@2", "overlap@2"])  # Python, and the server's
async def test_a_style_finding_on_a_defects_line_is_not_a_candidate(
        store: EventStore, scorer: str) -> None:
    await _snapshot(store)
    style = await _run(store, "baseline-ruff", {"i1": (E501, 10)})
    both = await _run(store, "baseline-ruff", {"i1": (E501, 10), "i2": (F821, 10)})
    crafted = await _run(store, "crafted", {"i1": (E501, 10)})
    await _projected(store)
    report = await rescoring.rescore(store, scorers.scorer(scorer),
                                     rescoring.Selection(everything=True))
    assert report.graded_runs == 3 and report.accounted
    await _projected(store)
    assert await _edges(store, style, scorer) == {"i1": None}
    assert await _edges(store, both, scorer) == {"i1": None, "i2": "T1"}
    # The negative control: the same line and words from a critic that is not a baseline.
    assert await _edges(store, crafted, scorer) == {"i1": "T1"}
    recalled = {r["run_id"]: r["recalled"] for r in await store.pool.fetch(
        "SELECT run_id, recalled FROM projections.run_scores WHERE scorer_name = $1",
        scorer.partition("@")[0])}
    assert (recalled[style], recalled[both], recalled[crafted]) == (0, 1, 1)


async def test_an_old_run_graded_before_the_rule_is_graded_again_by_it(
        store: EventStore) -> None:
    """A baseline run graded before the rule existed holds a find for its E501: re-scoring
    under the same scorer replaces it (ids that name the rule), once."""
    await _snapshot(store)
    old = await _run(store, "baseline-ruff", {"i1": (E501, 10)})
    s = scorers.scorer("tiered@2")
    await registration.ensure_registered(store, s)
    before = scorers.grade_event(s, old, "i1", scorers.Match("T1", 1, None, 1.0), GT_HASH)
    await store.append(streams.grading(old, "tiered@2"), [
        NewEvent(before, grade_ids.grade_id(before))])
    await _projected(store)
    assert await _edges(store, old, "tiered@2") == {"i1": "T1"}
    first = await rescoring.rescore(store, s, rescoring.Selection(run_ids=[old]))
    again = await rescoring.rescore(store, s, rescoring.Selection(run_ids=[old]))
    assert (first.appended, again.appended) == (1, 0)
    await _projected(store)
    assert await _edges(store, old, "tiered@2") == {"i1": None}
    [rec] = [r for r in await store.read_stream(streams.grading(old, "tiered@2"))
             if isinstance(r.event, catalog.GradeEmitted)][-1:]  # (then its chance level)
    assert rec.metadata.get("candidates") == candidates.RULE
    # The negative control: without the rule in its id the new grade is the old one's id,
    # and the append would have stored nothing.
    after = scorers.grade_event(s, old, "i1", scorers.Match(), GT_HASH)
    assert grade_ids.grade_id(after) == grade_ids.grade_id(before)
    assert grade_ids.grade_id(after, candidates.RULE) != grade_ids.grade_id(before)


def _row(records: list[dict[str, object]], definition: str) -> dict[str, object]:
    [row] = [r for r in records if r["definition"] == definition]
    return row


async def test_located_finds_are_unconfirmed_until_a_judge_or_a_person_reads_them(
        store: EventStore) -> None:
    await _snapshot(store)
    both = await _run(store, "baseline-ruff", {"i1": (E501, 10), "i2": (F821, 10)})
    crafted = await _run(store, "crafted", {"i1": (E501, 10)})
    await _projected(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await _projected(store)
    records, notes = await figures.load(store, "tiered", 2)
    for definition in ("baseline-ruff", "crafted"):
        row = _row(records, definition)
        assert (row["located_recall"], row["located"], row["confirmed"],
                row["unconfirmed"]) == (0.5, 1, 0, 1)
        # Nobody has looked: confirmed recall is unreviewed, never 0%.
        assert row["confirmed_recall"] is None and row["reviewed"] is False
    assert notes["confirmed_by"] == []  # nobody can have looked: the report says so
    said = "\n".join(figure_tables.confirmation_lines(records, notes))
    assert "no judge or person has looked" in said and "unconfirmed 1" in said
    assert "confirmed recall unreviewed" in said

    # A person confirms F821's find; a judge reads the E501 issue of the other run and says
    # it describes no known defect (the negative control: located, yet rejected).
    await reviews.confirm(store, both, "i2", "tiered", 2, reviewer="ana")
    judge = llm_judge.LlmJudge(version=1, model="m", base_url="http://127.0.0.1:9/v1",
                               name="judge")
    await registration.ensure_registered(store, judge)
    verdict = scorers.grade_event(judge, crafted, "i1", scorers.Match(), GT_HASH)
    await store.append(streams.grading(crafted, "judge@1"), [verdict])
    await _projected(store)
    # Only a verified judge confirms or rejects: this one's answer is kept, not counted.
    records, notes = await figures.load(store, "tiered", 2)
    rejected = _row(records, "crafted")
    assert (rejected["located"], rejected["confirmed"], rejected["rejected"],
            rejected["unconfirmed"]) == (1, 0, 0, 1)
    assert notes["unverified_judges"] == ["judge@1"]
    said = "\n".join(figure_tables.confirmation_lines(records, notes))
    assert "judge@1: unverified judge" in said
    await record_verification(store, judge)
    await _projected(store)
    records, notes = await figures.load(store, "tiered", 2)
    assert notes["unverified_judges"] == []
    confirmed, rejected = _row(records, "baseline-ruff"), _row(records, "crafted")
    assert (confirmed["located"], confirmed["confirmed"], confirmed["rejected"],
            confirmed["unconfirmed"], confirmed["confirmed_recall"]) == (1, 1, 0, 0, 0.5)
    assert (rejected["located"], rejected["confirmed"], rejected["rejected"],
            rejected["unconfirmed"], rejected["confirmed_recall"]) == (1, 0, 1, 0, 0.0)
    assert rejected["located_recall"] == 0.5  # located recall is what it was: the figures say which
    # "Confirmed by" names who confirmed something: the judge only rejected (it looked).
    assert notes["confirmed_by"] == ["human@1"]
    assert notes["reviewed_by"] == ["human@1", "judge@1"]
    said = "\n".join(figure_tables.confirmation_lines(records, notes))
    assert "confirmed by: human@1\n" in said and "no judge" not in said
    assert "reviewed (confirmed or rejected) by: human@1, judge@1" in said
    # A judge's own rows carry no confirmation: its finds are claims already read.
    records, _ = await figures.load(store, "judge", 1)
    assert all(r["located"] is None for r in records)


def _reads_the_claim(body: dict[str, Any]) -> dict[str, Any]:
    """A fake judge that reads the rationale: a line too long describes no defect; any other
    issue is the candidate it was asked about."""
    issue, known = judge_question(body)
    said = "none" if "Line too long" in issue["rationale"] else known["ref"]
    return {"choices": [{"message": {"role": "assistant",
                                     "content": json.dumps({"matches": {issue["id"]: said}})}}],
            "usage": {"prompt_tokens": 800, "completion_tokens": 40}}


async def test_a_judge_is_measured_on_located_candidates_and_against_people(
        store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    await _snapshot(store)
    await _run(store, "baseline-ruff", {"i1": (E501, 10), "i2": (F821, 10)})
    crafted = await _run(store, "crafted", {"i1": (E501, 10)})
    await _projected(store)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await _projected(store)
    await reviews.correct(store, crafted, "i1", reviews.Match(), reviewer="ana")
    await _projected(store)
    with chat_server(_reads_the_claim) as (url, seen):
        (tmp_path / "scorers.toml").write_text(
            f'["judge@1"]\nkind = "llm-judge"\nbase_url = "{url}"\nmodel = "m"\n')
        monkeypatch.setenv("PROPS_SCORERS_FILE", str(tmp_path / "scorers.toml"))
        args = argparse.Namespace(
            rule="tiered@2", scorer=["judge@1"], limit_runs=50, draws=1, run=None,
            since=None, until=None, model=None, definition=None, snapshot=None, all=True,
            format="json")
        assert await scorer_eval.located_cmd(args, store) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (out["runs"], out["candidates"], out["reviewed"]) == (2, 2, 1)
    [judged] = out["judges"]
    # It confirms F821's find (run `both`), not the line too long (run `crafted`) ...
    assert judged["confirms"]["confusion"]["right_tp"] == 1
    assert judged["confirms"]["wrong"] == [f"{crafted}/i1: got none, a reviewer says T1#1"]
    # ... and agrees with the person who said that one found nothing.
    assert judged["with_people"]["accuracy"] == 1.0
    # One call per run of the candidates (both, crafted), one for the reviewed (crafted),
    # and nothing recorded: a measurement, not grades.
    assert len(seen) == 3
    assert not [r async for r in _judge_streams(store)]


async def _judge_streams(store: EventStore) -> Any:
    for row in await store.pool.fetch(
            "SELECT stream_id FROM props.events WHERE stream_id LIKE 'judge-%' "
            "OR stream_id LIKE 'grading-%judge@1'"):
        yield row

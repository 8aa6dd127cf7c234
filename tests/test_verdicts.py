"""The scorer seam (`props.core.scoring.verdicts`): one contract, the same cases run on every
kind of scorer — the location rules as they are, an LLM judge and a panel against a real HTTP
server speaking OpenAI's chat format — the way the `eventsourcing` library runs one recorder
test case on each recorder."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from props.core.scoring import llm_judge, scorers, verdicts
from tests.fake_openai import chat_server
from tests.test_llm_judge import _answer
from tests.test_scoring import GT, loc

RUN = uuid.UUID(int=7)
ON_THE_LEAK = {"i1": loc("a.py", 10, 11)}


class RunScorerContract:
    """What every scorer owes its callers, whatever it is."""

    @pytest.fixture
    def grader(self) -> Iterator[verdicts.RunScorer]:
        raise NotImplementedError

    async def ask(self, grader: verdicts.RunScorer,
                  issues: dict[str, Any]) -> verdicts.RunVerdicts:
        return await grader.verdicts(None, RUN, issues, dict.fromkeys(issues, "why"), GT)

    async def test_an_issue_on_a_defect_finds_it(self, grader: verdicts.RunScorer) -> None:
        said = await self.ask(grader, ON_THE_LEAK)
        assert said.matches["i1"].key == ("leak", 1, None) and said.matches["i1"].find

    async def test_an_issue_where_no_defect_is_matches_nothing(
            self, grader: verdicts.RunScorer) -> None:
        said = await self.ask(grader, {"i1": loc("d.py", 1, 3)})
        assert said.matches == {"i1": scorers.Match()} and said.unscorable == {}

    async def test_the_verdicts_do_not_depend_on_the_order_of_issues(
            self, grader: verdicts.RunScorer) -> None:
        issues = {"i1": loc("a.py", 10, 12), "i2": loc("a.py", 10, 12), "i3": loc("a.py", 30, 30)}
        forward = await self.ask(grader, issues)
        backward = await self.ask(grader, dict(reversed(issues.items())))
        assert forward.matches == backward.matches and forward.unscorable == backward.unscorable

    async def test_every_issue_has_exactly_one_verdict(
            self, grader: verdicts.RunScorer) -> None:
        issues = {"i1": loc("a.py", 10, 11), "i2": loc("a.py", 30, 30),
                  "i3": loc("c.py", 5, 6), "i4": loc("e.py", 1, 1)}
        said = await self.ask(grader, issues)
        assert set(said.matches) | set(said.unscorable) == set(issues)
        assert not set(said.matches) & set(said.unscorable)

    async def test_without_a_store_nothing_is_recorded(
            self, grader: verdicts.RunScorer) -> None:
        assert (await self.ask(grader, ON_THE_LEAK)).calls == []

    def test_the_seam_gives_back_the_scorer_it_wraps(self, grader: verdicts.RunScorer) -> None:
        assert verdicts.of(grader.scorer) == grader


class TestOverlap(RunScorerContract):
    @pytest.fixture
    def grader(self) -> Iterator[verdicts.RunScorer]:
        yield verdicts.of(scorers.scorer("overlap@1"))

    def test_a_rule_costs_nothing(self, grader: verdicts.RunScorer) -> None:
        assert not grader.asks_a_model


class TestTiered(RunScorerContract):
    @pytest.fixture
    def grader(self) -> Iterator[verdicts.RunScorer]:
        yield verdicts.of(scorers.scorer("tiered@2"))


class TestJudge(RunScorerContract):
    @pytest.fixture
    def grader(self) -> Iterator[verdicts.RunScorer]:
        with chat_server(_answer) as (url, _seen):
            yield verdicts.of(llm_judge.LlmJudge(version=1, model="m", base_url=url))

    def test_a_judge_costs(self, grader: verdicts.RunScorer) -> None:
        assert grader.asks_a_model


class TestPanel(RunScorerContract):
    @pytest.fixture
    def grader(self) -> Iterator[verdicts.RunScorer]:
        with chat_server(_answer) as (url, _seen):
            judges = tuple(llm_judge.LlmJudge(version=n, model="m", base_url=url)
                           for n in (1, 2, 3))
            yield verdicts.of(llm_judge.LlmPanel(version=1, judges=judges))


def _gibberish(_body: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": "I think so."}}]}


async def test_an_answer_that_cannot_be_read_makes_issues_unscorable_not_none() -> None:
    """Only a model can fail to answer; the seam says why instead of "none" (a negative
    control of the contract's one-verdict case: unscorable is a verdict too)."""
    with chat_server(_gibberish) as (url, _seen):
        grader = verdicts.of(llm_judge.LlmJudge(version=1, model="m", base_url=url))
        said = await grader.verdicts(None, RUN, ON_THE_LEAK, {"i1": "why"}, GT)
    assert said.matches == {} and said.unscorable == {"i1": llm_judge.NOT_JSON}
    assert json.dumps(said.unscorable)  # a reason, in words


def test_a_judge_is_a_scorer_but_no_location_rule() -> None:
    """The protocol is a seam: a judge has no `match_run` that raises (it once raised
    TypeError, so callers branched on the concrete type); the rules have one; and the seam
    refuses what is neither, by name."""
    judge = llm_judge.LlmJudge(version=1, model="m", base_url="http://127.0.0.1:9/v1")
    assert not isinstance(judge, scorers.LocationRule) and not hasattr(judge, "match_run")
    assert all(isinstance(s, scorers.LocationRule) for s in scorers.SCORERS.values())
    assert isinstance(verdicts.of(judge), verdicts.ByModel)

    class Neither:
        name, version, deterministic, code_hash = "odd", 1, True, "0" * 64
        settings: ClassVar[dict[str, Any]] = {}

    with pytest.raises(TypeError, match="odd@1 is neither a location rule nor a judge"):
        verdicts.of(Neither())

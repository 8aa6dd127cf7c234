"""The seam every scorer is graded through: what it says of one run's issues.

A location rule (overlap, tiered) answers from the ground truth alone, at once and for
nothing; a judge or a panel asks a model, and the calls it made are recorded with its grades.
Re-scoring and `props scorers eval` ask `of(scorer).verdicts(...)` and never branch on the
kind of scorer they hold: `of` is the one place that tells a judge from a rule. (The rules'
classes do not carry the method themselves: their source is hashed into every grade they
ever emitted, and a method added would make every one of those grades look foreign.)
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Protocol

from props.core.domain import catalog
from props.core.log.events import Event
from props.core.log.store import EventStore
from props.core.scoring import scorers
from props.core.scoring.llm_judge import Judge


@dataclasses.dataclass(frozen=True)
class RunVerdicts:
    """A scorer's word on each issue of one run: a match, or why it could not grade it."""

    matches: dict[str, scorers.Match]
    unscorable: dict[str, str]  # issue -> the reason
    calls: list[Event]  # the model calls behind them, recorded with the grades (rules: none)


class RunScorer(Protocol):
    @property
    def scorer(self) -> scorers.Scorer: ...

    @property
    def asks_a_model(self) -> bool:
        """Whether an answer costs: such a scorer is asked once per run and ground truth,
        never on a dry run."""

    async def verdicts(self, store: EventStore | None, run_id: uuid.UUID,
                       issues: dict[str, list[catalog.Location]], rationales: dict[str, str],
                       gt: catalog.GroundTruth, never: frozenset[str] = frozenset(),
                       ) -> RunVerdicts:
        """Every issue of the run in exactly one of `matches` and `unscorable`; `store` None
        records nothing (a measurement, not a grading of history). `never`: the issues that
        are never candidates for a defect (`candidates.never`): a location rule matches
        them to nothing, a judge reads their claim like any other."""


@dataclasses.dataclass(frozen=True)
class ByLocation:
    """A rule over the issues' line ranges and the ground truth's."""

    scorer: scorers.LocationRule
    asks_a_model: bool = False

    async def verdicts(self, store: EventStore | None, run_id: uuid.UUID,
                       issues: dict[str, list[catalog.Location]], rationales: dict[str, str],
                       gt: catalog.GroundTruth, never: frozenset[str] = frozenset(),
                       ) -> RunVerdicts:
        # The rule never sees what is not a candidate: it matches nothing, and takes no
        # defect from another issue in a one-to-one assignment.
        matches = self.scorer.match_run(
            {i: locs for i, locs in issues.items() if i not in never}, gt)
        matches.update(dict.fromkeys(never & issues.keys(), scorers.Match()))
        return RunVerdicts(matches, {}, [])


@dataclasses.dataclass(frozen=True)
class ByModel:
    """A judge or a panel: the model's majority answer per issue, or why there is none."""

    scorer: Judge
    asks_a_model: bool = True

    async def verdicts(self, store: EventStore | None, run_id: uuid.UUID,
                       issues: dict[str, list[catalog.Location]], rationales: dict[str, str],
                       gt: catalog.GroundTruth, never: frozenset[str] = frozenset(),
                       ) -> RunVerdicts:
        if not issues:  # nothing to judge: the model is neither asked nor paid
            return RunVerdicts({}, {}, [])
        said, calls = await self.scorer.judge_run(store, run_id, issues, rationales, gt)
        return RunVerdicts({i: v for i, v in said.items() if isinstance(v, scorers.Match)},
                           {i: v for i, v in said.items() if isinstance(v, str)}, calls)


def of(s: scorers.Scorer) -> RunScorer:
    """How `s` is asked about a run."""
    if isinstance(s, Judge):
        return ByModel(s)
    if isinstance(s, scorers.LocationRule):
        return ByLocation(s)
    raise TypeError(f"{scorers.ref(s)} is neither a location rule nor a judge")

"""An evaluation's standing, the one answer to "where does it stand": each case's state, the
counts, the spend, the figures per critic, and whether it ended and how. `props eval show`
(and `run`'s closing report), the API's `GET /api/evaluations/{name}` and the viewer's
evaluation pages all read it here and only render it, so they cannot disagree.

Once the evaluation's version has ended (`evaluation.ended`), a case with no result is
missing (broken, never dropped), not waiting or running: nothing will move it any more.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from typing import Any

from props.core.domain import catalog, evaluations, streams
from props.core.domain.evaluations import DONE, CaseState, Evaluation
from props.core.log.store import EventStore
from props.core.scoring import intervals, registration
from props.projections import evaluation_scores
from props.projections.names import LIVE


@dataclasses.dataclass(frozen=True)
class Standing:
    ev: Evaluation
    scorer: str | None  # the active scorer the cases were judged under
    states: list[CaseState]  # one per case, in the plan's order
    ended: catalog.EvaluationEnded | None  # its version's last ending, if it ended
    found: evaluation_scores.Scored | None  # None: read without its figures
    # Where `scorer` comes from: "active" (this database's) or "origin" (an evaluation an
    # import brought is judged under the scorer its origin had active: the one that graded it)
    scorer_from: str = "active"
    active: str | None = None  # this database's active scorer

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(s.state for s in self.states))

    @property
    def done(self) -> int:
        """The cases with a result: scored or excluded (DONE). A failed case is not done:
        running the plan again retries it (one meaning of "done" for every reader)."""
        return sum(1 for s in self.states if s.state in DONE)

    @property
    def complete(self) -> bool:
        """Every case scored or excluded."""
        return all(s.state in DONE for s in self.states)

    @property
    def outcome(self) -> str:
        """complete; else how it ended (its recorded outcome); else incomplete."""
        if self.complete:
            return "complete"
        if self.ended is not None and self.ended.outcome != "complete":
            return self.ended.outcome
        return "incomplete"

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.states)

    @property
    def open_cases(self) -> list[CaseState]:
        return [s for s in self.states if s.state not in DONE]

    @property
    def critics(self) -> list[dict[str, Any]]:
        """Recall and precision per critic, with their intervals (as the analysts' tables)."""
        return [] if self.found is None else evaluation_scores.critic_rows(self.found)

    def as_json(self) -> dict[str, Any]:
        """The standing as `props eval show --format json` and the API give it."""
        return {"name": self.ev.name, "version": self.ev.version, "outcome": self.outcome,
                "ended": self.ended is not None, "complete": self.complete,
                "scorer": self.scorer, "scorer_from": self.scorer_from,
                "interval": intervals.METHOD, "counts": self.counts, "done": self.done,
                "cost_usd": self.cost_usd, "critics": self.critics,
                "confirmed_by": self.found.judges if self.found is not None else [],
                "reviewed_by": self.found.reviewed_by if self.found is not None else [],
                "cases": [evaluations.case_json(s) for s in self.states]}


async def ending(store: EventStore, ev: Evaluation) -> catalog.EvaluationEnded | None:
    """How `ev`'s version last ended, if it did."""
    ends = [r.event for r in await store.read_stream(streams.evaluation(ev.name))
            if isinstance(r.event, catalog.EvaluationEnded) and r.event.version == ev.version]
    return ends[-1] if ends else None


async def of(store: EventStore, ev: Evaluation, *, figures: bool = True) -> Standing:
    """Where `ev` stands now, under the active scorer (an evaluation an import brought:
    under the scorer its origin had active, recorded in the file as history); `figures`:
    with the per-critic figures (a list of evaluations needs only the states)."""
    active = await registration.active_scorer(store)
    scorer, scorer_from = active, "active"
    if ev.imported and (theirs := await registration.origin_scorer(store, ev.origin)):
        scorer, scorer_from = theirs, "origin"
    ended = await ending(store, ev)
    states = await evaluations.states_of(store, ev, ev.cases, scorer, ended is not None)
    found = await evaluation_scores.scored(store, ev.name, states, scorer) if figures else None
    return Standing(ev, scorer, states, ended, found, scorer_from, active)


async def counted_runs(store: EventStore, name: str) -> list[uuid.UUID]:
    """The runs that stand for the evaluation `name`'s cases, as the live projections have
    them (evaluation_scores.counted_runs: the one rule); NotFound: no such evaluation."""
    await evaluations.require(store, name)
    async with store.sql.acquire() as conn:
        return await evaluation_scores.counted_runs(conn, LIVE, name)


async def named(store: EventStore, name: str, *, figures: bool = True) -> Standing:
    """The standing of the evaluation `name`'s latest version (NotFound: none recorded)."""
    return await of(store, await evaluations.recorded(store, name), figures=figures)

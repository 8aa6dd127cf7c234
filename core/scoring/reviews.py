"""People's verdicts on grades: the queue of grades no person has judged yet, and the
`grade.reviewed` events that confirm or correct one.

`props review` and the viewer's review page both come here, so a verdict is checked the same
way wherever it is given: the issue must exist, a corrected match must be a TP occurrence or a
decoy of the ground truth the run is judged against, and nothing is written otherwise. A
verdict is a grade of the `human@1` scorer; it never overwrites a rule scorer's grade.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import orjson

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import registration, scorers
from props.schema import queries

_Q = queries.load("reviews")
# The human scorer's registration has one id, so registering it again is a no-op.
_NAMESPACE = uuid.UUID("2c8f7a51-93d4-4e6b-a0f2-5b1d7e9c3a64")


@dataclasses.dataclass(frozen=True)
class _Scorer:
    name: str
    version: int


@dataclasses.dataclass(frozen=True)
class _Grade:
    tp_id: str | None
    tp_occurrence: int | None
    fp_id: str | None
    grade: float
    code_hash: str
    ground_truth_hash: str


@dataclasses.dataclass(frozen=True)
class _Issue:
    issue_id: str
    ground_truth_hash: str | None
    snapshot: str


_ACTIVE = queries.typed("reviews", "active_scorer", _Scorer)
_GRADE_OF = queries.typed("reviews", "grade_of", _Grade)
_ISSUE_AND_TRUTH = queries.typed("reviews", "issue_and_truth", _Issue)


@dataclasses.dataclass(frozen=True)
class Match:
    """What an issue is matched to: a TP occurrence, a decoy, or nothing."""

    tp_id: str | None = None
    tp_occurrence: int | None = None
    fp_id: str | None = None

    @classmethod
    def parse_tp(cls, text: str) -> Match:
        """`ID` or `ID#N` (occurrence N, default 1)."""
        tp_id, _, number = text.partition("#")
        if not tp_id or (number and not number.isdigit()):
            raise errors.InvalidEvent(f"TP {text!r} is ID or ID#N")
        return cls(tp_id=tp_id, tp_occurrence=int(number or 1))

    def __str__(self) -> str:
        if self.tp_id:
            return f"TP {self.tp_id}#{self.tp_occurrence}"
        return f"decoy {self.fp_id}" if self.fp_id else "nothing"


@dataclasses.dataclass(frozen=True)
class Pending:
    """A grade waiting for a verdict, with what a reviewer needs beside it."""

    scorer: str
    grade: dict[str, Any]  # the grade's row: run_id, issue_id, tp_id, ..., rationale, snapshot
    truth: dict[tuple[str, str, int | None], dict[str, Any]]  # (kind, id, occurrence) -> row

    @property
    def match(self) -> Match:
        g = self.grade
        return Match(g["tp_id"], g["tp_occurrence"], g["fp_id"])

    @property
    def matched_truth(self) -> dict[str, Any] | None:
        g = self.grade
        key = ("tp", g["tp_id"], g["tp_occurrence"]) if g["tp_id"] else ("fp", g["fp_id"], None)
        return self.truth.get(key)


async def scorer_or_active(store: EventStore, ref: str | None) -> tuple[str, int]:
    """The scorer `ref` names, or the active one."""
    if ref is not None:
        return await registration.resolve_ref(store, ref)
    active = await projected_active(store)
    if active is None:
        raise errors.UnknownScorer("no scorer is active: name one with --scorer")
    return active


async def projected_active(store: EventStore) -> tuple[str, int] | None:
    """The active scorer as the projections have it (None before any activation)."""
    row = await store.sql.row(_ACTIVE)
    return None if row is None else (row.name, row.version)


async def pending(store: EventStore, name: str, version: int, limit: int = 1) -> list[Pending]:
    """The oldest grades under scorer (name, version) of issues no person has judged."""
    rows = await store.sql.fetch(_Q["unreviewed"], name, version, scorers.HUMAN_NAME, limit)
    truths: dict[tuple[str, str], dict[tuple[str, str, int | None], dict[str, Any]]] = {}
    found = []
    for row in rows:
        key = (row["snapshot"], row["ground_truth_hash"])
        if key not in truths:
            truths[key] = await _truth(store, *key)
        grade = {**dict(row), "locations": orjson.loads(row["locations"])}
        found.append(Pending(f"{name}@{version}", grade, truths[key]))
    return found


async def count_pending(store: EventStore, name: str, version: int,
                        judged: tuple[uuid.UUID, str] | None = None) -> int:
    """Grades of NAME@VERSION waiting for a verdict, besides `judged` (run, issue): the one
    a person just judged, whose verdict the projections may not have yet."""
    run, issue = judged or (None, None)
    return int(await store.sql.fetchval(_Q["unreviewed_count"], name, version,
                                        scorers.HUMAN_NAME, run, issue))


async def _truth(store: EventStore, snapshot: str, ground_truth_hash: str,
                 ) -> dict[tuple[str, str, int | None], dict[str, Any]]:
    found = {}
    for t in await store.sql.fetch(_Q["truth_ids"], snapshot, ground_truth_hash):
        locations = orjson.loads(t["locations"])
        if locations and isinstance(locations[0], list):  # a decoy's: by occurrence
            locations = [loc for occurrence in locations for loc in occurrence]
        found[(t["kind"], t["id"], t["occurrence"])] = {**dict(t), "locations": locations}
    return found


async def confirm(store: EventStore, run_id: uuid.UUID, issue_id: str, name: str,
                  version: int, reviewer: str, note: str = "") -> Match:
    """Agree with scorer (name, version)'s grade of one issue. A partial match (a TP at
    less than full credit) is confirmed as what it counts for: no find."""
    grade = await store.sql.row(_GRADE_OF, run_id, issue_id, name, version)
    if grade is None:
        raise errors.NotFound(f"no grade of run {run_id} issue {issue_id!r} under "
                              f"{name}@{version}")
    find = grade.grade >= scorers.FIND_GRADE
    match = Match(grade.tp_id if find else None, grade.tp_occurrence if find else None,
                  grade.fp_id)
    await _append(store, catalog.GradeReviewed(
        critique_run_id=run_id, critique_issue_id=issue_id, tp_id=match.tp_id,
        tp_occurrence=match.tp_occurrence, fp_id=match.fp_id,
        ground_truth_hash=grade.ground_truth_hash,
        confirms=catalog.ScorerRef(name=name, version=version, code_hash=grade.code_hash,
                                   ground_truth_hash=grade.ground_truth_hash),
        reviewer=reviewer, note=note))
    return match


async def correct(store: EventStore, run_id: uuid.UUID, issue_id: str, match: Match,
                  reviewer: str, note: str = "") -> str:
    """Give one issue the match it should have had; returns the run's snapshot."""
    found = await store.sql.row(_ISSUE_AND_TRUTH, run_id, issue_id)
    if found is None or found.ground_truth_hash is None:
        raise errors.NotFound(f"no issue {issue_id!r} in run {run_id} (or its snapshot is "
                              f"not recorded)")
    truth = await _truth(store, found.snapshot, found.ground_truth_hash)
    if match.tp_id is not None and ("tp", match.tp_id, match.tp_occurrence) not in truth:
        raise errors.InvalidEvent(f"{found.snapshot} has no TP occurrence "
                                  f"{match.tp_id}#{match.tp_occurrence}; nothing was written")
    if match.fp_id is not None and ("fp", match.fp_id, None) not in truth:
        raise errors.InvalidEvent(f"{found.snapshot} has no decoy {match.fp_id}; nothing "
                                  f"was written")
    await _append(store, catalog.GradeReviewed(
        critique_run_id=run_id, critique_issue_id=issue_id, tp_id=match.tp_id,
        tp_occurrence=match.tp_occurrence, fp_id=match.fp_id,
        ground_truth_hash=found.ground_truth_hash, reviewer=reviewer, note=note))
    return found.snapshot


async def _append(store: EventStore, verdict: catalog.GradeReviewed) -> None:
    registered = scorers.human_registration()
    await store.append(streams.scorer(scorers.HUMAN_NAME), [NewEvent(
        registered, uuid.uuid5(_NAMESPACE, f"register:{scorers.HUMAN}"))])
    await store.append(streams.review(verdict.critique_run_id), [NewEvent(
        verdict, uuid.uuid4(), {"actor": f"reviewer:{verdict.reviewer}"})])

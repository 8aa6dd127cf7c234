"""A judge measured on located candidates: the finds a location rule made in recorded runs,
as grading cases (`evaluation.Case`) the judge is asked about.

A judge confirms a candidate when it names the defect the rule located. Two figures, never
mixed: on the candidates a person reviewed (`props review`), the judge's *agreement with
people* (the person's verdict is the label); on all of them, how many the judge
*confirms* (the rule's defect is the label: its accuracy there is its confirmation rate,
not a correctness). The judge sees each run's candidates with their rationales and the
run's ground truth, as when it grades; nothing is recorded (a measurement, not grades:
`props rescore --scorer JUDGE` records them, and then they count as confirmations).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pydantic

from props.core.domain import catalog
from props.core.domain.specimens import specimen_sync
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import evaluation, rescoring
from props.schema import queries

_Q = queries.load("located")
_LOCATIONS = pydantic.TypeAdapter(list[catalog.Location])


@dataclasses.dataclass(frozen=True)
class Candidates:
    """Located candidates as cases: all of them labelled with the located defect, and those
    a person reviewed labelled with the person's verdict."""

    located: list[evaluation.Case]
    reviewed: list[evaluation.Case]
    runs: int


def _label(row: Any, person: bool) -> str:
    if not person:
        return f"{row['tp_id']}#{row['tp_occurrence']}"
    if row["human_tp"] is not None:
        return f"{row['human_tp']}#{row['human_occurrence']}"
    return f"fp:{row['human_fp']}" if row["human_fp"] is not None else "none"


def _cases(rows: list[Any], truth: dict[tuple[str, str], catalog.GroundTruth],
           person: bool) -> list[evaluation.Case]:
    by_run: dict[uuid.UUID, list[Any]] = {}
    for row in rows:
        if (row["snapshot"], row["ground_truth_hash"]) in truth:
            by_run.setdefault(row["run_id"], []).append(row)
    return [evaluation.Case(
        id=f"{run}", why="located by the rule", location_decides=False,
        ground_truth=truth[(mine[0]["snapshot"], mine[0]["ground_truth_hash"])],
        issues={r["issue_id"]: _LOCATIONS.validate_json(r["locations"]) for r in mine},
        expect={r["issue_id"]: frozenset([_label(r, person)]) for r in mine},
        rationales={r["issue_id"]: r["rationale"] for r in mine})
        for run, mine in by_run.items()]


async def candidates(store: EventStore, rule: tuple[str, int],
                     selection: rescoring.Selection, limit: int) -> Candidates:
    """The selected runs' candidates under `rule` (NAME, VERSION), at most `limit` runs of
    them (the first by run id): each run a case."""
    runs = sorted(r.run_id for r in await rescoring.selected_runs(store, selection,
                                                                  issues=False))
    rows = await store.sql.fetch(_Q["candidates"], runs, *rule)
    kept = sorted({r["run_id"] for r in rows})[:limit]
    rows = [r for r in rows if r["run_id"] in set(kept)]
    if not rows:
        raise errors.NotFound(f"no located candidate under {rule[0]}@{rule[1]} in the "
                              f"selected runs (props rescore --scorer {rule[0]}@{rule[1]})")
    truth = {(v.slug, v.ground_truth_hash): v.ground_truth
             for h in (await specimen_sync.history(store)).values() for v in h.versions}
    return Candidates(_cases(rows, truth, person=False),
                      _cases([r for r in rows if r["reviewed"]], truth, person=True),
                      len(kept))

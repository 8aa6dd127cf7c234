"""An evaluation's figures, read from the analysts' tables: recall and precision per critic
over its scored cases, and the paired comparison of two critics (of one evaluation or of
two) over the examples both scored. One interval method, the report's (intervals.METHOD).

A critic is a (definition, model); an example a (snapshot, file set). Both figures sum each
example's counts first, so the bootstrap resamples examples, never single runs.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from props.core.domain import streams
from props.core.domain.evaluations import CaseState
from props.core.log import database
from props.core.log.store import EventStore
from props.core.scoring import intervals
from props.projections import confirmation
from props.projections.names import LIVE
from props.projections.tables import check_schema
from props.schema import queries

_Q = queries.load("evaluations")
Critic = tuple[str, str]  # (definition, model)
Example = tuple[str, str | None]  # (snapshot, files_hash)
# What one example's scored runs sum to: recalled, expected, finds, graded, and recall's
# chance level (expected finds by chance: props.core.scoring.chance).
# Recall here is what the location rule found: `located_recall` (no figure called recall
# counts a find nobody confirmed; `confirmed_recall` is beside it).
MEASURES = (("located_recall", 0, 1), ("precision", 2, 3))


@dataclasses.dataclass(frozen=True)
class Scored:
    """Each critic's per-example sums over its scored cases, and how many cases it had."""

    sums: dict[Critic, dict[Example, list[float]]]
    cases: dict[Critic, int]
    scored: dict[Critic, int]
    # Per critic and example, of the located finds: confirmed, rejected (confirmation).
    confirmed: dict[Critic, dict[Example, list[int]]] = dataclasses.field(
        default_factory=dict)
    judges: list[str] = dataclasses.field(default_factory=list)  # who confirmed something
    # Per critic, its scored runs whose chance level is not recorded (then it has none).
    chance_missing: dict[Critic, int] = dataclasses.field(default_factory=dict)
    reviewed_by: list[str] = dataclasses.field(default_factory=list)  # who graded any issue
    # Per critic and example, recall's chance level summed exactly (the runs' levels as
    # PostgreSQL's numeric has them, as `props report` sums them in SQL): a float sum in
    # another order differs in the last bits, and one evaluation has one figure.
    chance_exact: dict[Critic, dict[Example, Decimal]] = dataclasses.field(
        default_factory=dict)


async def counted_runs(conn: database.Connection, schema: str, name: str) -> list[uuid.UUID]:
    """The runs that stand for the evaluation `name`'s cases, as the projections in `schema`
    have them: each case's latest attempt of its latest version, of the evaluation's own
    provenance (the view `evaluation_runs`: the one rule of every reader of its figures, the
    analysts' SQL included). Of these, only completed runs not excluded are in a figure."""
    return [r[0] for r in await conn.fetch(
        _Q["counted_runs"].replace("{schema}", check_schema(schema)), name)]


async def scored(store: EventStore, name: str, states: Sequence[CaseState],
                 scorer: str | None) -> Scored:
    """The evaluation `name`'s sums under `scorer` (none without one: nothing is scored
    then), over its counted runs that run_scores scores (`states`: its cases, for their
    critics and examples and how many each critic has)."""
    cases: dict[Critic, int] = {}
    counted: dict[Critic, int] = {}
    for s in states:
        critic = (s.case.definition, s.case.model)
        cases[critic] = cases.get(critic, 0) + 1
        counted[critic] = counted.get(critic, 0) + (s.state == "scored")
    sums: dict[Critic, dict[Example, list[float]]] = {c: {} for c in cases}
    if scorer is None:
        return Scored(sums, cases, counted)
    ref, version = streams.parse_ref(scorer)
    said: dict[uuid.UUID, Any] = {}
    judges: list[str] = []
    looked: list[str] = []
    async with store.sql.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                             readonly=True):
        runs = await counted_runs(conn, LIVE, name)
        by_run = {r["run_id"]: r for r in await conn.fetch(_Q["case_scores"], runs, ref,
                                                           version)}
        if await confirmation.judges(conn, LIVE):
            said = {r["run_id"]: r for r in await conn.fetch(_Q["case_confirmations"], runs,
                                                             ref, version)}
            judges, looked = await confirmation.reviewers(conn, LIVE, runs)
    confirmed: dict[Critic, dict[Example, list[int]]] = {c: {} for c in cases}
    missing: dict[Critic, int] = {c: 0 for c in cases}
    exact: dict[Critic, dict[Example, Decimal]] = {c: {} for c in cases}
    for s in states:
        if s.run_id is None or (r := by_run.get(s.run_id)) is None:
            continue  # not counted, or counted and not scored (failed, excluded, waiting)
        critic, key = (s.case.definition, s.case.model), (s.case.snapshot, s.case.files_hash)
        example = sums[critic].setdefault(key, [0.0, 0.0, 0.0, 0.0, 0.0])
        for i, column in enumerate(("recalled", "expected", "finds", "graded")):
            example[i] += r[column]
        chances = exact[critic]
        chances[key] = chances.get(key, Decimal(0)) + (r["chance_recalled"] or Decimal(0))
        example[4] = float(chances[key])
        missing[critic] += r["chance_recalled"] is None
        verdicts = confirmed[critic].setdefault(key, [0, 0])
        if (c := said.get(s.run_id)) is not None:
            verdicts[0] += c["confirmed"]
            verdicts[1] += c["rejected"]
    return Scored(sums, cases, counted, confirmed, judges, missing, looked, exact)


def critic_rows(found: Scored) -> list[dict[str, Any]]:
    """Recall and precision per critic, each with its interval."""
    out = []
    for (definition, model), examples in sorted(found.sums.items()):
        row: dict[str, Any] = {"definition": definition, "model": model,
                               "cases": found.cases[(definition, model)],
                               "scored": found.scored[(definition, model)]}
        for measure, k, n in MEASURES:
            clusters = [(e[k], e[n]) for e in examples.values()]
            total_n = sum(c[1] for c in clusters)
            row[measure] = sum(c[0] for c in clusters) / total_n if total_n else None
            row[f"{measure}_low"], row[f"{measure}_high"] = intervals.ratio_interval(clusters)
        row.update(chance_fields(examples, found.chance_missing.get((definition, model), 0),
                                 found.chance_exact.get((definition, model))))
        said = found.confirmed.get((definition, model), {})
        row.update(confirmation.fields(
            sum(e[0] for e in examples.values()), sum(c[1] for c in said.values()),
            [(said.get(ex, [0, 0])[0], e[1]) for ex, e in examples.items()]))
        out.append(row)
    return out


def chance_fields(examples: dict[Example, list[float]], missing: int,
                  exact: dict[Example, Decimal] | None = None) -> dict[str, Any]:
    """Recall's chance level and recall above chance with its interval (as the report's,
    props.projections.figures.chance_fields): none where a run's chance is not recorded.
    `exact`: the examples' chance sums as numeric, summed exactly as the report's SQL does
    (without it, the examples' floats in their order)."""
    expected = sum(e[1] for e in examples.values())
    if missing or not expected:
        return {"chance": None, "above_chance": None, "above_chance_low": None,
                "above_chance_high": None, "chance_missing": missing}
    chance = (float(sum(exact.values(), Decimal(0))) if exact is not None
              else sum(e[4] for e in examples.values())) / expected
    low, high = intervals.ratio_interval([(e[0] - e[4], e[1]) for e in examples.values()])
    return {"chance": chance,
            "above_chance": sum(e[0] for e in examples.values()) / expected - chance,
            "above_chance_low": low, "above_chance_high": high, "chance_missing": 0}


def paired(a: dict[Example, list[float]], b: dict[Example, list[float]],
           chance_missing: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """B against A over the examples both scored: each side's recall and precision there,
    each side's chance level and recall above it (none for a side with a run whose chance is
    not recorded: `chance_missing` per side), B minus A with a paired bootstrap interval,
    and the examples only one side has (left out of the pairing, and counted so)."""
    shared = sorted(set(a) & set(b))
    row: dict[str, Any] = {"examples": len(shared), "only_a": len(set(a) - set(b)),
                           "only_b": len(set(b) - set(a))}
    for measure, k, n in MEASURES:
        diff = intervals.paired_difference(
            [((a[e][k], a[e][n]), (b[e][k], b[e][n])) for e in shared])
        for side, examples in (("a", a), ("b", b)):
            total_n = sum(examples[e][n] for e in shared)
            row[f"{measure}_{side}"] = sum(examples[e][k] for e in shared) / total_n \
                if total_n else None
            row[f"{measure}_{side}_low"], row[f"{measure}_{side}_high"] = \
                intervals.ratio_interval([(examples[e][k], examples[e][n]) for e in shared])
        row[f"{measure}_delta"] = diff.delta
        row[f"{measure}_delta_low"], row[f"{measure}_delta_high"] = diff.low, diff.high
        row[f"{measure}_significant"] = diff.significant
    for side, examples, missing in (("a", a, chance_missing[0]), ("b", b, chance_missing[1])):
        # (a recall B - A above chance would only restate the recall delta when the
        # examples are shared; each side's own level is what says whether it beat chance)
        level = chance_fields({e: examples[e] for e in shared}, missing)
        row[f"chance_{side}"] = level["chance"]
        for end in ("", "_low", "_high"):
            row[f"above_chance_{side}{end}"] = level[f"above_chance{end}"]
    row["per_example"] = [{"snapshot": e[0], "files_hash": e[1], **{
        f"{measure}_{side}": _ratio(x[e][k], x[e][n])
        for measure, k, n in MEASURES for side, x in (("a", a), ("b", b))}} for e in shared]
    return row


def _ratio(k: float, n: float) -> float | None:
    return k / n if n else None

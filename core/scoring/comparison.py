"""Two scorers (or versions) side by side, run by run: which runs' grades changed, how much
the scores moved (with paired intervals), and how often the two agree.

Every selected run ends in exactly one bucket: unchanged, changed, or unscorable.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from typing import Any

import orjson

from props.core.domain.specimens import specimen_sync
from props.core.log.store import EventStore
from props.core.scoring import intervals, registration
from props.core.scoring.rescoring import (
    Selection,
    ground_truth_for,
    parse_issues,
    selected_runs,
    unscorable_reason,
)
from props.schema import queries

_Q = queries.load("rescoring")


@dataclasses.dataclass(frozen=True)
class _Edge:
    critique_run_id: uuid.UUID
    critique_issue_id: str
    scorer_name: str
    scorer_version: int
    tp_id: str | None
    tp_occurrence: int | None
    fp_id: str | None
    unscorable: str | None  # why the scorer could not grade the issue (a judge's answer)


@dataclasses.dataclass(frozen=True)
class _RunScore:
    run_id: uuid.UUID
    scorer_name: str
    scorer_version: int
    recall: float | None
    precision: float | None
    model: str
    definition: str
    snapshot: str
    files_hash: str
    recalled: int
    expected: int
    finds: int
    graded: int


_EDGES_OF = queries.typed("rescoring", "edges_of", _Edge)
_SCORES_OF = queries.typed("rescoring", "scores_of", _RunScore)


@dataclasses.dataclass
class RunDiff:
    run_id: uuid.UUID
    model: str
    definition: str
    recall_a: float | None
    recall_b: float | None
    precision_a: float | None
    precision_b: float | None
    changed_issues: list[str]
    what: list[str] = dataclasses.field(default_factory=list)  # per issue: A's match -> B's

    @property
    def figures_changed(self) -> bool:
        """Whether the run's recall or precision differs (else only which occurrence or
        decoy an issue matched did)."""
        return (self.recall_a, self.precision_a) != (self.recall_b, self.precision_b)


@dataclasses.dataclass
class Comparison:
    a: str
    b: str
    selected: int = 0
    unchanged: list[uuid.UUID] = dataclasses.field(default_factory=list)
    changed: list[RunDiff] = dataclasses.field(default_factory=list)
    unscorable: dict[uuid.UUID, str] = dataclasses.field(default_factory=dict)
    groups: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    agreement: Agreement | None = None

    @property
    def complete(self) -> bool:
        return len(self.unchanged) + len(self.changed) + len(self.unscorable) == self.selected


@dataclasses.dataclass(frozen=True)
class Agreement:
    """How often two scorers say the same of an issue (the same TP occurrence, the same FP,
    or nothing known), over the issues both graded, and Cohen's kappa: that agreement
    corrected for what the two would agree on by chance."""

    issues: int
    agreed: int
    kappa: float | None  # None when chance alone explains all agreement (one category)

    @property
    def percent(self) -> float | None:
        return 100.0 * self.agreed / self.issues if self.issues else None


def agreement(pairs: list[tuple[Any, Any]]) -> Agreement:
    n = len(pairs)
    if not n:
        return Agreement(0, 0, None)
    agreed = sum(a == b for a, b in pairs)
    count_a = Counter(a for a, _ in pairs)
    count_b = Counter(b for _, b in pairs)
    chance = sum(count_a[k] * count_b[k] for k in count_a) / (n * n)
    observed = agreed / n
    kappa = None if chance == 1 else (observed - chance) / (1 - chance)
    return Agreement(n, agreed, kappa)


def _match(edge: tuple[Any, ...] | None) -> str:
    """An issue's match as a person reads it: TP t1#2 (its occurrence), FP d1, or none."""
    if edge is None:
        return "ungraded"
    tp_id, occurrence, fp_id = edge
    if tp_id is not None:
        return f"TP {tp_id}" + (f"#{occurrence}" if occurrence is not None else "")
    return f"FP {fp_id}" if fp_id is not None else "none"


async def compare(store: EventStore, a: str, b: str, selection: Selection) -> Comparison:
    """Put every selected run in exactly one bucket: unchanged, changed, or unscorable."""
    name_a, ver_a = await registration.resolve_ref(store, a)
    name_b, ver_b = await registration.resolve_ref(store, b)
    result = Comparison(a, b)
    known = await specimen_sync.history(store)
    runs = await selected_runs(store, selection)
    result.selected = len(runs)
    ids = [r.run_id for r in runs]
    edges: dict[tuple[uuid.UUID, str, int], dict[str, tuple[Any, ...]]] = {}
    unread: dict[tuple[uuid.UUID, str, int], str] = {}  # a run's first issue not graded
    scores: dict[tuple[uuid.UUID, str, int], _RunScore] = {}
    for start in range(0, len(ids), 5000):
        chunk = ids[start:start + 5000]
        for e in await store.sql.rows(_EDGES_OF, chunk, [name_a, name_b]):
            key = (e.critique_run_id, e.scorer_name, e.scorer_version)
            edges.setdefault(key, {})[e.critique_issue_id] = (e.tp_id, e.tp_occurrence, e.fp_id)
            if e.unscorable is not None:
                unread.setdefault(key, e.unscorable)
        for s in await store.sql.rows(_SCORES_OF, chunk, [name_a, name_b]):
            scores[(s.run_id, s.scorer_name, s.scorer_version)] = s
    pairs: list[tuple[Any, Any]] = []  # each scorable issue's match under A and under B
    for run in runs:
        reason = unscorable_reason(run, ground_truth_for(run, known, "at-run"),
                                   parse_issues(run))
        got_a = edges.get((run.run_id, name_a, ver_a), {})
        got_b = edges.get((run.run_id, name_b, ver_b), {})
        if reason is None and run.issues and len(got_a) < len(run.issues):
            reason = f"not graded by {a}"
        if reason is None and run.issues and len(got_b) < len(run.issues):
            reason = f"not graded by {b}"
        # An issue a scorer could not grade is no verdict: neither agreement nor a change.
        for ref, key in ((a, (run.run_id, name_a, ver_a)), (b, (run.run_id, name_b, ver_b))):
            if reason is None and key in unread:
                reason = f"{ref} could not grade an issue: {unread[key]}"
        if reason is not None:
            result.unscorable[run.run_id] = reason
            continue
        pairs.extend((got_a.get(i), got_b.get(i)) for i in run.issues)
        changed = sorted(i for i in run.issues if got_a.get(i) != got_b.get(i))
        if not changed:
            result.unchanged.append(run.run_id)
            continue
        sa = scores.get((run.run_id, name_a, ver_a))
        sb = scores.get((run.run_id, name_b, ver_b))
        result.changed.append(RunDiff(
            run.run_id, run.model, run.definition,
            sa.recall if sa else None, sb.recall if sb else None,
            sa.precision if sa else None, sb.precision if sb else None, changed,
            [f"{i}: {_match(got_a.get(i))} -> {_match(got_b.get(i))}" for i in changed]))
    scorable = [i for i in ids if i not in result.unscorable]
    rows = await store.sql.fetch(_Q["group_scores"], scorable, name_a, ver_a, name_b, ver_b)
    result.groups = [dict(r) for r in rows]
    _add_differences(result.groups, [scores.get((run_id, name_a, ver_a)) for run_id in scorable],
                     [scores.get((run_id, name_b, ver_b)) for run_id in scorable])
    result.agreement = agreement(pairs)
    return result


def _add_differences(groups: list[dict[str, Any]], a: list[_RunScore | None],
                     b: list[_RunScore | None]) -> None:
    """Each side's interval and whether B differs from A, per model and definition: the
    cluster bootstrap over the examples both scored (props.core.scoring.intervals, the
    report's own), for recall and for precision. `a` and `b` are the runs' scores under A
    and under B, in the same order."""
    measures = (("recall", "recalled", "expected"), ("precision", "finds", "graded"))
    # (model, definition) -> example -> measure -> [A's k, A's n, B's k, B's n]
    sums: dict[tuple[str, str], dict[tuple[str, str], list[list[float]]]] = {}
    for sa, sb in zip(a, b, strict=True):
        if sa is None or sb is None:
            continue
        example = sums.setdefault((sa.model, sa.definition), {}).setdefault(
            (sa.snapshot, sa.files_hash), [[0.0] * 4 for _ in measures])
        for totals, (_, k, n) in zip(example, measures, strict=True):
            for i, value in enumerate((getattr(sa, k), getattr(sa, n),
                                       getattr(sb, k), getattr(sb, n))):
                totals[i] += value
    for group in groups:
        examples = [v for _, v in sorted(sums.get((group["model"], group["definition"]),
                                                  {}).items())]
        for m, (measure, _, _) in enumerate(measures):
            diff = intervals.paired_difference(
                [((e[m][0], e[m][1]), (e[m][2], e[m][3])) for e in examples])
            group[f"{measure}_delta_low"] = diff.low
            group[f"{measure}_delta_high"] = diff.high
            group[f"{measure}_significant"] = diff.significant
            for side, first in (("a", 0), ("b", 2)):  # each side's own: the report's
                group[f"{measure}_{side}_low"], group[f"{measure}_{side}_high"] = \
                    intervals.ratio_interval([(e[m][first], e[m][first + 1]) for e in examples])
        group["examples"] = len(examples)


def comparison_json(c: Comparison) -> bytes:
    return orjson.dumps({
        "a": c.a, "b": c.b, "selected": c.selected, "unchanged": len(c.unchanged),
        "changed": [dataclasses.asdict(d) for d in c.changed],
        "unscorable": {str(k): v for k, v in c.unscorable.items()},
        "complete": c.complete, "groups": c.groups,
        "agreement": None if c.agreement is None else {
            "issues": c.agreement.issues, "agreed": c.agreement.agreed,
            "percent": c.agreement.percent, "kappa": c.agreement.kappa},
    }, default=str)

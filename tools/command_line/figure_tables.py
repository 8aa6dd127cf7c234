"""The analysts' figures as the terminal shows them: the report's table and notes, and the
comparison of two scorers. `props report`, `props compare` and the demo print these."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.text import Text

from props.core.scoring import comparison, intervals, rescoring
from props.tools.command_line.render import Column, Console, print_table


def percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def with_interval(g: Mapping[str, Any], measure: str) -> str:
    """`measure` of row `g` with its interval (`measure_low`, `measure_high`)."""
    return f"{percent(g[measure])} [{percent(g[f'{measure}_low'])}, " \
        f"{percent(g[f'{measure}_high'])}]"


# The report's columns. Below the width they need (an 80-column terminal, a pipe) the
# optional ones are left out and named under the table, as gh does, rather than every cell
# cut to `refer…`; `--wide` shows them all.
def _count(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: str(int(r[key] or 0))


_COLUMNS = [
    Column("model", "model"),
    Column("definition", "definition"),
    Column("scorer", "scorer"),
    # A row over 6 runs is not a row over 12: the runs stay beside the figures at any width
    # (the intervals wrap between their words first).
    Column("runs", "runs (examples)", shows=lambda r: f"{r['runs']} ({r['examples']})",
           short="runs (ex.)", justify="right"),
    Column("recall", "recall [interval]", shows=lambda r: with_interval(r, "recall"),
           prose=True),
    # Chance sits in the cell that subtracts it (a column of its own would not fit 80).
    Column("above_chance", "above chance [interval] (chance)", prose=True,
           shows=lambda r: f"{with_interval(r, 'above_chance')} ({percent(r['chance'])})"),
    Column("precision", "precision [interval]",
           shows=lambda r: with_interval(r, "precision"), prose=True),
    Column("partial", "partial", shows=_count("partial"), optional=True),
    Column("known_fp", "known FP", shows=_count("known_fp"), optional=True),
    Column("unmatched", "unmatched", shows=_count("unmatched"), optional=True),
    Column("mean_run_recall", "run recall mean ± sd", optional=True, shows=lambda r:
           f"{percent(r['mean_run_recall'])} ± {percent(r['stddev_run_recall'])}"),
]


def critic_columns(rows: Sequence[Mapping[str, Any]], optional_model: bool = False,
                   ) -> list[Column]:
    """The model and the definition, or one column where every row's are the same (a
    baseline's tool is its model). `optional_model`: the model may be left out of a narrow
    table (the definition names the critic)."""
    if rows and all(r["model"] == r["definition"] for r in rows):
        return [Column("definition", "model = definition", short="critic")]
    return [Column("definition", "definition"),
            Column("model", "model", optional=optional_model)]


def print_report(records: list[dict[str, Any]], notes: dict[str, Any],
                wide: bool = False) -> None:
    console = Console()
    print_table(console, [*critic_columns(records), *_COLUMNS[2:]], records, wide=wide)
    if split := sorted({r["definition"].partition(" (")[0] for r in records if r.get("digest")}):
        console.print(Text(f"{', '.join(split)}: runs of several digests under one name "
                           f"(another image, runtime or config), each digest a row of its "
                           f"own (its first 12 hex digits beside the name); a variant of "
                           f"your own is best named apart: props definitions reference "
                           f"--name N --config FILE"))
    if scope := notes.get("scope"):
        console.print(Text("only the runs of " + ", ".join(
            f"{k} {v}" for k, v in scope.items())))
    console.print(Text(f"intervals: {notes['interval_method']}"))
    console.print(Text(
        f"as of log point {notes['as_of']} (`props report --as-of {notes['as_of']}` gives "
        "this report again)" if notes["as_of"] else
        "the projections stand at different points of the log: run `props projections "
        "run` (or rebuild) before quoting these figures"))
    console.print(Text(evidence_line(notes)))
    if line := scorers_line(notes):
        console.print(Text(line))
    if notes["adjudicated_issues"]:
        console.print(Text(f"adjudicated: {notes['adjudicated_issues']} grade(s) replaced by "
                           f"a person's verdict (props review)"))
    for line in [*confirmation_lines(records, notes), *chance_lines(records)]:
        console.print(Text(line))
    if notes["imported_runs"]:
        signers = ", ".join(f"{k.removeprefix('imported_by_')}: {v}" for k, v in notes.items()
                            if k.startswith("imported_by_"))
        console.print(
            f"scored runs from imported export files: {notes['imported_runs']} ({signers}); "
            + ("left out of the figures above" if notes["imported_excluded"] else
               "included above (--exclude-imported leaves them out)"))


# Each state a critic run can be in under the report's scorer: its short name, and what it
# means (said when some run is in it).
_STATES = [
    ("scored", "scored", ""), ("excluded", "excluded", "run.excluded"),
    ("unfinished", "missing evidence", "no finish event"),
    ("not_completed", "not completed", "finished, not completed"),
    ("no_issues", "no issues", "completed, reported nothing: in the figures, found nothing"),
    ("ungraded", "ungraded", "issues the scorer has not graded"),
    ("unscorable", "unscorable", "graded against ground truth that is not recorded"),
    ("parked", "parked", "an event of the run some consumer parked: its figures may be "
                         "partial; `props projections status` names it"),
]


def evidence_line(notes: Mapping[str, Any]) -> str:
    """Every critic run of the report in one state: the states some run is in, each with its
    count and meaning, then the empty ones in one clause (nine zero counts took seven
    lines of an 80-column terminal)."""
    under = notes["states_scorer"] or "no scorer (none is active)"
    standing = notes.get("scorer_standing", {}).get(notes["states_scorer"])
    if standing and standing["standing"] != "verified":
        under += f" ({standing['standing']})"
    some = [f"{short} {notes[key]}" + (f" ({means})" if means else "")
            for key, short, means in _STATES if notes[key]]
    none = [short for key, short, _ in _STATES if not notes[key]]
    return (f"critic runs: {notes['critic_runs']}, each in one state under {under}: "
            + "; ".join(some or ["none"])
            + (f"; none {', '.join(none[:-1])} or {none[-1]}" if len(none) > 1 else
               f"; none {none[0]}" if none else ""))


def scorers_line(notes: Mapping[str, Any]) -> str | None:
    """Each scorer of the report by its identity (short), and what is not verified."""
    standing = notes.get("scorer_standing") or {}
    if not standing:
        return None
    return "scorers: " + "; ".join(
        f"{ref} (identity {s['identity'] or 'unknown'}) {s['standing']}"
        + (f": {s['detail']}" if s["detail"] else "") for ref, s in sorted(standing.items()))


def confirmation_lines(records: Sequence[Mapping[str, Any]],
                       notes: Mapping[str, Any]) -> list[str]:
    """Recall above is *located* (an issue pointed at the defect's lines): per row, how many
    of those finds a judge or a person confirmed, and the recall of the confirmed only."""
    lines = ["located and confirmed: recall counts the defects an issue pointed at "
             "(located); a find is confirmed once a judge or a person said the issue "
             "describes the defect"]
    for r in records:
        if r.get("located") is None:  # a judge's or a person's own row: claims already read
            continue
        critic = r["definition"] if r["model"] == r["definition"] else \
            f"{r['model']} / {r['definition']}"
        lines.append(f"  {critic}, {r['scorer']}: located {r['located']} = confirmed "
                     f"{r['confirmed']} + rejected {r['rejected']} + unconfirmed "
                     f"{r['unconfirmed']}; confirmed recall "
                     f"{with_interval(r, 'confirmed_recall')}")
    judges = notes.get("confirmed_by") or []
    lines.append("  confirmed by: " + ", ".join(judges) if judges else
                 "  no judge or person has looked at any find: every located find is "
                 "unconfirmed (props review; props rescore --scorer JUDGE@N)")
    lines += [f"  {j}: unverified judge: its answers are kept, not counted as confirmed or "
              f"rejected (props scorers verify {j})" for j in notes.get("unverified_judges", [])]
    return lines if records else []


def chance_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """What chance means; the rows without one, and why; and graded recall (partial credit)
    only beside its own chance level, never alone."""
    if not records:
        return []
    lines = ["chance: the recall the same issues would get anywhere in their files (each "
             "keeps its file and span; a run's issues in a file move together to a random "
             "offset); above chance = recall - chance (docs/reference/chance.md)"]
    graded = []
    for r in records:
        critic = r["definition"] if r["model"] == r["definition"] else \
            f"{r['model']} / {r['definition']}"
        where = f"{critic}, {r['scorer']}" if r.get("scorer") else critic
        if r.get("chance_missing"):
            lines.append(f"  {where}: no chance level for {r['chance_missing']} run(s) (a "
                         f"file's content is not stored, or graded before chance levels: "
                         f"props rescore), so no chance and no graded recall")
        elif r.get("chance_graded") is not None and r.get("recall_graded") is not None:
            graded.append(f"  {where}: graded recall {percent(r['recall_graded'])}, by "
                          f"chance {percent(r['chance_graded'])}, above chance "
                          f"{percent(r['recall_graded'] - r['chance_graded'])}")
    if graded:
        lines += ["graded recall counts partial credit too (tiered: within 5 lines 0.6, "
                  "anywhere in the same file 0.3), which chance earns as well: each beside "
                  "its chance level:", *graded]
    return lines


def _delta(g: Mapping[str, Any], measure: str) -> str:
    mark = "*" if g.get(f"{measure}_significant") else ""
    low, high = g.get(f"{measure}_delta_low"), g.get(f"{measure}_delta_high")
    shown = f" [{percent(low)}, {percent(high)}]" if low is not None else ""
    return f"{percent(g[f'{measure}_delta'])}{mark}{shown}"


CHANGED_SHOWN = 20  # runs graded differently that the table lists


def _print_changed(console: Console, c: comparison.Comparison, wide: bool) -> None:
    """The runs whose figures changed, each with what changed (an issue's match under A and
    under B); the runs whose issues matched otherwise with the same figures, counted."""
    moved = [d for d in c.changed if d.figures_changed]
    if moved:
        shown = moved[:CHANGED_SHOWN]
        print_table(console, [
            Column("run_id", "run", lambda r: str(r)[:8]),
            *critic_columns([dataclasses.asdict(d) for d in shown]),
            *(Column(f"{m}_{side}", f"{m} {ref}", percent, justify="right",
                     short=f"{m[0].upper()} {side.upper()}")
              for m in ("recall", "precision") for side, ref in (("a", c.a), ("b", c.b))),
            Column("what", "what changed (issue: match under A -> under B)",
                   lambda what: "; ".join(what), prose=True, short="what changed")],
            [dataclasses.asdict(d) for d in shown], wide=wide,
            title=f"runs whose figures changed ({len(moved)}"
                  + (f"; the first {CHANGED_SHOWN}: --format csv lists every one)"
                     if len(moved) > CHANGED_SHOWN else ")"))
    same = [d for d in c.changed if not d.figures_changed]
    if same:
        example = same[0].what[0]
        console.print(Text(
            f"{len(same)} run(s) with the same figures under both, an issue matching "
            f"another occurrence or decoy (e.g. {str(same[0].run_id)[:8]} {example}; "
            f"--format csv lists them)"))


def print_comparison(c: comparison.Comparison, wide: bool = False) -> None:
    console = Console()
    print_table(console, [
        *critic_columns(c.groups),
        Column("recall_a", f"recall {c.a}", shows=lambda g: with_interval(g, "recall_a"),
               short="recall A", prose=True),
        Column("recall_b", f"recall {c.b}", shows=lambda g: with_interval(g, "recall_b"),
               short="recall B", prose=True),
        Column("recall_delta", "recall B - A", shows=lambda g: _delta(g, "recall"), short="ΔR",
               prose=True),
        Column("precision_a", f"precision {c.a}", percent,
               short="prec. A"),
        Column("precision_b", f"precision {c.b}", percent,
               short="prec. B"),
        Column("precision_delta", "precision B - A", shows=lambda g: _delta(g, "precision"),
               short="ΔP", prose=True),
        ], c.groups, wide=wide)
    console.print(f"intervals: {intervals.METHOD}; deltas B - A paired over the same "
                  f"examples, * where the interval excludes 0")
    _print_changed(console, c, wide)
    reasons: dict[str, int] = {}
    for reason in c.unscorable.values():
        kind = rescoring.reason_kind(reason)
        reasons[kind] = reasons.get(kind, 0) + 1
    moved = sum(1 for d in c.changed if d.figures_changed)
    console.print(
        f"{c.selected} run(s) selected = {len(c.unchanged)} unchanged + {len(c.changed)} "
        f"changed ({moved} in their figures, {len(c.changed) - moved} in matches only) + "
        f"{len(c.unscorable)} unscorable"
        + "".join(f"\n  unscorable: {n} {kind}" for kind, n in sorted(reasons.items())))
    agree = c.agreement
    if agree is not None and agree.issues:
        kappa = "-" if agree.kappa is None else f"{agree.kappa:.3f}"
        console.print(f"agreement on {agree.issues} issue(s): {agree.agreed} the same "
                      f"({agree.percent:.1f}%), Cohen's kappa {kappa}")

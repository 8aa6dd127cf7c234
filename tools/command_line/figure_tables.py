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
    """`measure` of row `g` and its interval in one cell that never wraps: `17.6% ±20.0`,
    half the interval's width in points (the exact bounds: `bounds`, --wide, JSON, CSV)."""
    low, high = g.get(f"{measure}_low"), g.get(f"{measure}_high")
    if g[measure] is None or low is None or high is None:
        return percent(g[measure])
    return f"{percent(g[measure])} ±{50 * (high - low):.1f}"


def bounds(g: Mapping[str, Any], measure: str) -> str:
    """`measure` of row `g` with its interval's exact bounds: `17.6% [0.0%, 40.0%]`."""
    return f"{percent(g[measure])} [{percent(g[f'{measure}_low'])}, " \
        f"{percent(g[f'{measure}_high'])}]"


BELOW = "↓"  # beside a located recall below its chance level


def below_chance(g: Mapping[str, Any]) -> bool:
    return g.get("located_recall") is not None and g.get("chance") is not None \
        and g["located_recall"] < g["chance"]


def confirmed_cell(g: Mapping[str, Any], wide: bool = False) -> str:
    """Confirmed recall, or `unreviewed (N)` while nobody has said anything of the row's N
    candidates (never 0%); none for a judge's own row (its finds are claims already read)."""
    if g.get("located") is None:
        return "-"
    if not g.get("reviewed", True):
        return f"unreviewed ({g['located']}" + (" candidates)" if wide else ")")
    return (bounds if wide else with_interval)(g, "confirmed_recall")


def figure_columns(rows: Sequence[Mapping[str, Any]], wide: bool = False,
                   optional_model: bool = True) -> list[Column]:
    """The figures' columns, one line per row at 80 columns: each figure and its interval
    in one cell that never wraps (the exact bounds with `wide`); confirmed recall first,
    then located recall (marked BELOW under its chance level), above chance, precision;
    the chance level, the counts and the spread where there is room. The scorer is a
    column only where the rows have several (else the caller names it above the table)."""
    interval = bounds if wide else with_interval
    several = len({r.get("scorer") for r in rows}) > 1
    return [
        *critic_columns(rows, optional_model),
        *([Column("scorer", "scorer")] if several else []),
        Column("runs", "runs (examples)" if not rows or "examples" in rows[0] else
               "scored of cases", short="runs", justify="right",
               shows=lambda r: f"{r['runs']} ({r['examples']})" if "examples" in r else
               f"{r['scored']} of {r['cases']}"),
        Column("confirmed_recall", "confirmed recall", short="confirmed",
               shows=lambda r: confirmed_cell(r, wide)),
        Column("located_recall", "located recall", short="located", shows=lambda r: (
            interval(r, "located_recall").replace("%", "%" + BELOW, 1)
            if below_chance(r) else interval(r, "located_recall"))),
        Column("above_chance", "above chance", short="above ch.",
               shows=lambda r: interval(r, "above_chance")),
        Column("precision", "precision", shows=lambda r: interval(r, "precision"),
               optional=several),
        Column("chance", "chance", percent, optional=True, justify="right"),
        # The report's counts and spread; rows without them (`props eval show`'s critics)
        # get no such column at all rather than a header over empty cells under --wide.
        *[c for c in (
            Column("partial", "partial", shows=_count("partial"), optional=True),
            Column("known_fp", "known FP", shows=_count("known_fp"), optional=True),
            Column("unmatched", "unmatched", shows=_count("unmatched"), optional=True),
            Column("mean_run_located", "run located mean ± sd", optional=True,
                   shows=lambda r: f"{percent(r['mean_run_located'])} ± "
                   f"{percent(r['stddev_run_located'])}" if "mean_run_located" in r else ""),
        ) if any(c.key in r for r in rows)],
    ]


# The report's columns. Below the width they need (an 80-column terminal, a pipe) the
# optional ones are left out and named under the table, as gh does, rather than every cell
# cut to `refer…`; `--wide` shows them all.
def _count(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: str(int(r[key] or 0)) if key in r else ""


def critic_columns(rows: Sequence[Mapping[str, Any]], optional_model: bool = False,
                   ) -> list[Column]:
    """The model and the definition, or one column where every row's are the same (a
    baseline's tool is its model). `optional_model`: the model may be left out of a narrow
    table (the definition names the critic)."""
    if rows and all(r["model"] == r["definition"] for r in rows):
        return [Column("definition", "model = definition", short="critic")]
    return [Column("definition", "definition"),
            Column("model", "model", optional=optional_model)]


def figure_notes(rows: Sequence[Mapping[str, Any]], scorer: str | None) -> list[str]:
    """What the figures' table needs said under it: the scorer (when one), the unreviewed
    rows and the command that reviews them, the mark of a figure below chance."""
    lines = []
    if scorer and len({r.get("scorer", scorer) for r in rows}) <= 1:
        lines.append(f"scorer: {scorer}; located recall: the known defects an issue pointed "
                     f"at (candidates); confirmed recall: those a judge or a person confirmed")
    if any(not r.get("reviewed", True) for r in rows):
        lines.append("unreviewed (N): N located candidates that no judge or person has "
                     "looked at yet (props review next; or props rescore --scorer JUDGE@N)")
    if any(below_chance(r) for r in rows):
        lines.append(f"{BELOW}: located recall below its chance level (what the same issues "
                     f"would get anywhere in their files): nothing found beyond chance")
    return lines


def print_report(records: list[dict[str, Any]], notes: dict[str, Any],
                wide: bool = False) -> None:
    console = Console()
    print_table(console, figure_columns(records, wide), records, wide=wide)
    scorers = {r["scorer"] for r in records}
    for line in figure_notes(records, scorers.pop() if len(scorers) == 1 else None):
        console.print(Text(line))
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
    if notes.get("behind_events"):
        console.print(Text(f"the projections are {notes['behind_events']} event(s) behind the "
                           f"log: these figures do not show them yet (props projections run)"))
    console.print(Text(evidence_line(notes)))
    if said := scorers_line(notes):
        console.print(Text(said))
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
    ("not_completed", "not completed", "failed, timed out, over budget or cancelled: "
                                       "left out of every figure; its partial output is "
                                       "on its run page"),
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
    lines = ["located and confirmed: located recall counts the defects an issue pointed "
             "at (candidates); a find is confirmed once a judge or a person said the issue "
             "describes the defect, and only confirmed finds are recall"]
    for r in records:
        if r.get("located") is None:  # a judge's or a person's own row: claims already read
            continue
        critic = r["definition"] if r["model"] == r["definition"] else \
            f"{r['model']} / {r['definition']}"
        lines.append(f"  {critic}, {r['scorer']}: located {r['located']} = confirmed "
                     f"{r['confirmed']} + rejected {r['rejected']} + unconfirmed "
                     f"{r['unconfirmed']}; confirmed recall "
                     + ("unreviewed" if not r.get("reviewed", True) else
                        bounds(r, "confirmed_recall")))
    judges = notes.get("confirmed_by") or []
    looked = notes.get("reviewed_by") or judges
    lines.append("  confirmed by: " + ", ".join(judges) if judges else
                 "  no judge or person has confirmed any find" if looked else
                 "  no judge or person has looked at any find: every located find is "
                 "unconfirmed (props review next; props rescore --scorer JUDGE@N)")
    if [j for j in looked if j not in judges]:
        lines.append("  reviewed (confirmed or rejected) by: " + ", ".join(looked))
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
        elif r.get("chance_graded") is not None and r.get("located_graded") is not None:
            graded.append(f"  {where}: graded located {percent(r['located_graded'])}, by "
                          f"chance {percent(r['chance_graded'])}, above chance "
                          f"{percent(r['located_graded'] - r['chance_graded'])}")
    if graded:
        lines += ["graded located counts partial credit too (tiered: within 5 lines 0.6, "
                  "anywhere in the same file 0.3), which chance earns as well: each beside "
                  "its chance level:", *graded]
    return lines


def _delta(g: Mapping[str, Any], measure: str) -> str:
    mark = "*" if g.get(f"{measure}_significant") else ""
    return with_interval(g, f"{measure}_delta") + mark


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
        Column("recall_a", f"located {c.a}", shows=lambda g: with_interval(g, "recall_a"),
               short="located A"),
        Column("recall_b", f"located {c.b}", shows=lambda g: with_interval(g, "recall_b"),
               short="located B"),
        Column("recall_delta", "located B - A", shows=lambda g: _delta(g, "recall"),
               short="ΔL"),
        Column("precision_a", f"precision {c.a}", percent,
               short="prec. A"),
        Column("precision_b", f"precision {c.b}", percent,
               short="prec. B"),
        Column("precision_delta", "precision B - A", shows=lambda g: _delta(g, "precision"),
               short="ΔP"),
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

"""The analysts' figures as the terminal shows them: the report's table and notes, and the
comparison of two scorers. `props report`, `props compare` and the demo print these."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text

from props.core.scoring import comparison, intervals, rescoring
from props.tools.arguments import WIDE_AT
from props.tools.render import Console, Table


def percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


# The table's columns: (header, cell, shown at any width). At less than WIDE_AT columns
# (an 80-column terminal, a pipe) the others are left out, as gh does, rather than every cell
# cut to `refer…`; `--wide` shows them all.
_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str], bool]] = [
    ("model", lambda r: str(r["model"]), True),
    ("definition", lambda r: str(r["definition"]), True),
    ("scorer", lambda r: str(r["scorer"]), True),
    ("runs (examples)", lambda r: f"{r['runs']} ({r['examples']})", True),
    ("recall [95% CI]", lambda r: f"{percent(r['recall'])} [{percent(r['recall_low'])}, "
                                  f"{percent(r['recall_high'])}]", True),
    ("graded recall", lambda r: percent(r["recall_graded"]), False),
    ("precision [95% CI]", lambda r: f"{percent(r['precision'])} [{percent(r['precision_low'])}, "
                                     f"{percent(r['precision_high'])}]", True),
    ("partial", lambda r: str(int(r["partial"] or 0)), False),
    ("known FP", lambda r: str(int(r["known_fp"] or 0)), False),
    ("unmatched", lambda r: str(int(r["unmatched"] or 0)), False),
    ("run recall mean ± sd", lambda r: f"{percent(r['mean_run_recall'])} ± "
                                       f"{percent(r['stddev_run_recall'])}", False),
]


def print_report(records: list[dict[str, Any]], notes: dict[str, Any],
                wide: bool = False) -> None:
    console = Console()
    every = wide or console.width >= WIDE_AT
    shown = [(header, cell) for header, cell, always in _COLUMNS if every or always]
    table = Table(*(header for header, _cell in shown))
    for r in records:
        table.add_row(*(cell(r) for _header, cell in shown))
    console.print(table)
    if left := [header for header, _cell, always in _COLUMNS if not (every or always)]:
        console.print(Text(f"not shown at {console.width} columns: {', '.join(left)} "
                           f"(--wide, --format csv or json)"))
    if scope := notes.get("scope"):
        console.print(Text("only the runs of " + ", ".join(
            f"{k} {v}" for k, v in scope.items())))
    console.print(Text(f"intervals: {notes['interval_method']}"))
    console.print(Text(
        f"as of log point {notes['as_of']} (`props report --as-of {notes['as_of']}` gives "
        "this report again)" if notes["as_of"] else
        "the projections stand at different points of the log: run `props projections "
        "run` (or rebuild) before quoting these figures"))
    under = notes["states_scorer"] or "no scorer (none is active)"
    console.print(Text(
        f"critic runs: {notes['critic_runs']}, each in one state under {under}: scored: "
        f"{notes['scored']}; excluded (run.excluded): {notes['excluded']}; without a finish "
        f"event (missing evidence): "
        f"{notes['unfinished']}; finished but not completed: {notes['not_completed']}; "
        f"completed with no issue reported (in the figures, found nothing): "
        f"{notes['no_issues']}; with "
        f"issues {under} has not graded: {notes['ungraded']}; graded against ground truth "
        f"that is not recorded (unscorable): {notes['unscorable']}; touched by an event some "
        f"consumer parked (its figures may be partial; `props projections status` and "
        f"`props reactors status` name it): {notes['parked']}"))
    if notes["adjudicated_issues"]:
        console.print(Text(f"adjudicated: {notes['adjudicated_issues']} grade(s) replaced by "
                           f"a person's verdict (props review)"))
    if notes["imported_runs"]:
        signers = ", ".join(f"{k.removeprefix('imported_by_')}: {v}" for k, v in notes.items()
                            if k.startswith("imported_by_"))
        console.print(
            f"scored runs from imported export files: {notes['imported_runs']} ({signers}); "
            + ("left out of the figures above" if notes["imported_excluded"] else
               "included above (--exclude-imported leaves them out)"))


def _with_interval(g: dict[str, Any], measure: str) -> str:
    return f"{percent(g[measure])} [{percent(g[f'{measure}_low'])}, " \
        f"{percent(g[f'{measure}_high'])}]"


def _delta(g: dict[str, Any], measure: str) -> str:
    mark = "*" if g.get(f"{measure}_significant") else ""
    low, high = g.get(f"{measure}_delta_low"), g.get(f"{measure}_delta_high")
    shown = f" [{percent(low)}, {percent(high)}]" if low is not None else ""
    return f"{percent(g[f'{measure}_delta'])}{mark}{shown}"


def print_comparison(c: comparison.Comparison) -> None:
    console = Console(highlight=False)
    table = Table("model", "definition", f"recall {c.a}", f"recall {c.b}", "delta",
                  f"precision {c.a}", f"precision {c.b}", "delta")
    for g in c.groups:
        table.add_row(
            g["model"], g["definition"],
            _with_interval(g, "recall_a"), _with_interval(g, "recall_b"),
            _delta(g, "recall"), percent(g["precision_a"]), percent(g["precision_b"]),
            _delta(g, "precision"))
    console.print(table)
    console.print(f"deltas: B - A with a paired {intervals.METHOD}; * where the interval "
                  f"excludes 0")
    reasons: dict[str, int] = {}
    for reason in c.unscorable.values():
        kind = rescoring.reason_kind(reason)
        reasons[kind] = reasons.get(kind, 0) + 1
    console.print(
        f"{c.selected} run(s) selected = {len(c.unchanged)} unchanged + {len(c.changed)} "
        f"changed + {len(c.unscorable)} unscorable"
        + "".join(f"\n  unscorable: {n} {kind}" for kind, n in sorted(reasons.items())))
    agree = c.agreement
    if agree is not None and agree.issues:
        kappa = "-" if agree.kappa is None else f"{agree.kappa:.3f}"
        console.print(f"agreement on {agree.issues} issue(s): {agree.agreed} the same "
                      f"({agree.percent:.1f}%), Cohen's kappa {kappa}")

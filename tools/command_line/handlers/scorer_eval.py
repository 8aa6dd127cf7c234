"""What `props scorer_eval` does: the handlers that the parsers of
`props.tools.command_line.commands.scorer_eval` name."""

from __future__ import annotations

import argparse

import orjson
from rich.text import Text

from props.core.log import errors
from props.core.scoring import evaluation, scorers
from props.tools.bundled import samples
from props.tools.command_line.render import Column, Console, print_table

console = Console()
# The confusion table's short headers at 80 columns (named under the table).
_SHORT = {"right_tp": "TP ok", "wrong_tp": "TP bad", "tp_missed": "TP miss",
          "false_find": "FF", "decoy_right": "D ok", "decoy_wrong": "D bad",
          "right_none": "N ok", "unscorable": "unsc."}


async def eval_cmd(args: argparse.Namespace) -> int:
    if args.draws < 1:
        raise errors.ConfigurationError("--draws takes a whole number from 1")
    if args.min_accuracy is not None and not 0 <= args.min_accuracy <= 1:
        raise errors.ConfigurationError("--min-accuracy takes a number from 0 to 1")
    cases = evaluation.load(args.cases or samples.cases_dir())
    refs = args.scorer or list(scorers.SCORERS)
    results = [await evaluation.evaluate(scorers.scorer(ref), cases, args.draws)
               for ref in refs]
    below = [r.scorer for r in results
             if args.min_accuracy is not None and r.accuracy < args.min_accuracy]
    if args.format == "table":
        _print(results, cases, args.wide)
    else:
        print(orjson.dumps({"cases": len(cases), "issues": results[0].issues if results else 0,
                            "needs_judge": evaluation.needs_judge(cases),
                            "scorers": [r.summary() for r in results],
                            "below_min_accuracy": below}).decode())
    return 1 if below else 0


def _print(results: list[evaluation.Result], cases: list[evaluation.Case], wide: bool) -> None:
    print_table(console, [
        Column("scorer", "scorer"), Column("accuracy", "accuracy", justify="right"),
        *(Column(c, c.replace("_", " "), short=_SHORT[c], justify="right")
          for c in evaluation.CELLS)],
        [{"scorer": r.scorer, "accuracy": f"{100 * r.accuracy:.1f}%",
          **{c: r.cells[c] for c in evaluation.CELLS}}
         for r in results], wide=wide)
    judge = evaluation.needs_judge(cases)
    console.print(Text(f"{len(cases)} cases, {results[0].issues if results else 0} issues; "
                       f"{len(judge)} only a judge can decide: {', '.join(judge) or 'none'}"))
    for r in results:
        if r.agreement is not None:
            console.print(Text(f"{r.scorer}: draws agreed on {100 * r.agreement:.1f}% of "
                               f"issues"))
        for line in r.wrong_decidable:
            console.print(Text(f"{r.scorer} wrong where location decides: {line}"))

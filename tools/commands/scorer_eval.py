"""`props scorers eval`: each scorer's accuracy and confusion table on labelled grading cases
(props.core.scoring.evaluation), with the JSON summary as the last line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson
from rich.text import Text

from props.core.log import errors
from props.core.scoring import evaluation, scorers
from props.tools import samples
from props.tools.render import Console, Table

console = Console(highlight=False)


def add_parser(cmds: Any) -> None:
    p = cmds.add_parser(
        "eval", help="measure scorers on labelled grading cases",
        description="Run each scorer on labelled grading cases (a ground-truth fragment, one "
        "run's issues, the match a careful reviewer gives each issue, and whether location "
        "alone can decide it) and print its accuracy and confusion table: right TP, wrong TP, "
        "TP missed, false find, decoy right, decoy wrong, right none. A find is a match at "
        "full credit; partial credit counts as nothing. Lists the location-decidable cases a "
        "scorer got wrong, and the cases only a judge can decide. Default: the cases shipped "
        "with props (add your own files to a copy of the folder) and every built-in scorer.")
    p.add_argument("cases", nargs="?", type=Path, metavar="CASES_DIR",
                   help=f"a folder of *.toml case files (default: {samples.cases_dir()})")
    p.add_argument("--scorer", action="append", metavar="NAME@VERSION",
                   help="a scorer to measure (repeat for several; default: every built-in)")
    p.add_argument("--draws", type=int, default=1, metavar="N",
                   help="ask a scorer that is not deterministic N times, take the majority "
                        "and report the agreement across draws")
    p.add_argument("--min-accuracy", type=float, metavar="X",
                   help="exit 1 when a scorer's accuracy is below X (0 to 1)")
    p.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    p.set_defaults(handler=eval_cmd)


async def eval_cmd(args: argparse.Namespace) -> int:
    if args.draws < 1:
        raise errors.ConfigurationError("--draws takes a whole number from 1")
    if args.min_accuracy is not None and not 0 <= args.min_accuracy <= 1:
        raise errors.ConfigurationError("--min-accuracy takes a number from 0 to 1")
    cases = evaluation.load(args.cases or samples.cases_dir())
    refs = args.scorer or list(scorers.SCORERS)
    results = [await evaluation.evaluate(scorers.scorer(ref), cases, args.draws)
               for ref in refs]
    _print(results, cases)
    below = [r.scorer for r in results
             if args.min_accuracy is not None and r.accuracy < args.min_accuracy]
    if args.json:
        print(orjson.dumps({"cases": len(cases), "issues": results[0].issues if results else 0,
                            "needs_judge": evaluation.needs_judge(cases),
                            "scorers": [r.summary() for r in results],
                            "below_min_accuracy": below}).decode())
    return 1 if below else 0


def _print(results: list[evaluation.Result], cases: list[evaluation.Case]) -> None:
    table = Table("scorer", "accuracy", *[c.replace("_", " ") for c in evaluation.CELLS])
    for r in results:
        table.add_row(r.scorer, f"{100 * r.accuracy:.1f}%",
                      *[str(r.cells[c]) for c in evaluation.CELLS])
    console.print(table)
    judge = evaluation.needs_judge(cases)
    console.print(Text(f"{len(cases)} cases, {results[0].issues if results else 0} issues; "
                       f"{len(judge)} only a judge can decide: {', '.join(judge) or 'none'}"))
    for r in results:
        if r.agreement is not None:
            console.print(Text(f"{r.scorer}: draws agreed on {100 * r.agreement:.1f}% of "
                               f"issues"))
        for line in r.wrong_decidable:
            console.print(Text(f"{r.scorer} wrong where location decides: {line}"))

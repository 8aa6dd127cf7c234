"""`props scorers eval`: each scorer's accuracy and confusion table on labelled grading cases
(props.core.scoring.evaluation), or as one JSON document."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from props.tools.command_line import arguments


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
                   help="a folder of *.toml case files (default: the labelled cases props "
                        "ships, in its package's tools/bundled/grading_cases)")
    p.add_argument("--scorer", action="append", metavar="NAME@VERSION",
                   help="a scorer to measure (repeat for several; default: every built-in)")
    p.add_argument("--draws", type=int, default=1, metavar="N",
                   help="ask a scorer that is not deterministic N times, take the majority "
                        "and report the agreement across draws")
    p.add_argument("--min-accuracy", type=float, metavar="X",
                   help="exit 1 when a scorer's accuracy is below X (0 to 1)")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="scorer_eval:eval_cmd")


def add_located_parser(cmds: Any, selectors: Callable[[argparse.ArgumentParser], None]) -> None:
    p = cmds.add_parser(
        "eval-located", help="measure a judge on the finds a location rule made in recorded runs",
        description="Ask a judge about the candidates a location rule located in recorded runs "
        "(its finds, each with the run's ground truth and the issue's rationale) and print, "
        "never mixed: how many it confirms (names the defect the rule located), and on the "
        "candidates a person reviewed (props review), its agreement with the person. Nothing "
        "is recorded: `props rescore --scorer JUDGE` records a judge's grades, and then they "
        "confirm finds in `props report`.")
    p.add_argument("rule", metavar="RULE@VERSION", help="the location rule whose finds are "
                   "asked about, e.g. tiered@2 (its grades must be recorded)")
    p.add_argument("--scorer", action="append", required=True, metavar="NAME@VERSION",
                   help="a judge of the scorers file (repeat for several)")
    p.add_argument("--limit-runs", type=int, default=50, metavar="N",
                   help="ask about the candidates of at most N runs (default 50: a judge's "
                        "calls cost)")
    p.add_argument("--draws", type=int, default=1, metavar="N",
                   help="ask N times, take the majority and report the agreement across draws")
    selectors(p)
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="scorer_eval:located_cmd", connections=2)

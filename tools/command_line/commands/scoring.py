"""`props scorers ...`, `props rescore`, `props compare`: grade history again, side by side."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from props.tools.command_line import arguments
from props.tools.command_line.commands import scorer_eval


def add_parsers(sub: Any) -> None:
    sc = sub.add_parser("scorers", help="registered scorers; register or activate one",
                        description="Scorers are named and versioned (NAME@VERSION). Each "
                        "registration is an event with the scorer's code hash; the active "
                        "scorer (also an event) is the one grading_pending follows.")
    cmds = sc.add_subparsers(dest="scorers_command", metavar="ACTION", required=True)
    p = cmds.add_parser("list", help="scorers this props knows, and their registration",
                        description="Every scorer this props can run, its code hash, and "
                        "whether the log has it registered and active.")
    arguments.add_format(p)
    p.set_defaults(handler="scoring:list_cmd", connections=2)
    scorer_eval.add_parser(cmds)
    scorer_eval.add_located_parser(cmds, _selectors)
    p = cmds.add_parser("register", help="record a scorer's registration in the log",
                        description="Record a scorer's registration in the log.")
    p.add_argument("scorer", help="NAME@VERSION, e.g. overlap@2")
    p.set_defaults(handler="scoring:register_cmd", connections=2)
    _verify_parser(cmds)
    p = cmds.add_parser(
        "activate", help="make a verified scorer the active one (registers it if needed)",
        description="Make a scorer the active one: only when a completed verification of "
        "its exact bytes (its identity, `props scorers list`) on a cohort that is still "
        "current passes the policy ($PROPS_POLICY_FILE, default $PROPS_HOME/policy.toml; "
        "docs/howto/scorer.md gives the defaults). A refusal says what to run and exits 77, "
        "writing nothing. Asking for the active scorer changes nothing.")
    p.add_argument("scorer", help="NAME@VERSION, e.g. overlap@2")
    p.add_argument("--force", action="store_true",
                   help="activate although the gate refuses (needs --reason; recorded with "
                   "who asked, and every figure it grades says so)")
    p.add_argument("--reason", type=arguments.bounded_text(2000), metavar="TEXT",
                   help="why, with --force (1 to 2,000 characters)")
    p.set_defaults(handler="scoring:activate_cmd", connections=2)

    p = sub.add_parser(
        "rescore", help="grade recorded runs again under a scorer version",
        description="Grade the selected runs again from what was recorded (their issues, the "
        "ground truth in the log), without running any agent. Grades go to the scorer "
        "version's own streams; other versions' grades are never touched. Running it again "
        "appends nothing; after a crash, run it again to finish. Runs and issues are read "
        "from the projections: keep `props projections run` going (or rebuild) first. "
        "Overlap scorers grade on the database server, other scorers in Python.")
    p.add_argument("--scorer", required=True, help="NAME@VERSION, e.g. overlap@2")
    _selectors(p)
    p.add_argument("--ground-truth", choices=["at-run", "latest"], default="at-run",
                   help="the snapshot version current when each run was requested "
                   "(default), or the latest")
    p.add_argument("--dry-run", action="store_true", help="grade and report, write nothing")
    p.set_defaults(handler="scoring:rescore_cmd", connections=3)

    p = sub.add_parser(
        "compare", help="compare two scorers run by run",
        description="Put every selected run in exactly one bucket (unchanged, changed with its "
        "deltas and changed issues, or unscorable with the reason) and show recall and "
        "precision per model and definition under A and B. Reads projections: run "
        "`props projections run` (or rebuild) after a rescore. Exit 0 only when every run is "
        "accounted for.")
    p.add_argument("a", help="scorer A, NAME@VERSION")
    p.add_argument("b", help="scorer B, NAME@VERSION")
    _selectors(p)
    arguments.add_format(p)
    p.set_defaults(handler="scoring:compare_cmd", connections=2)


def _verify_parser(cmds: Any) -> None:
    p = cmds.add_parser(
        "verify", help="replay a cohort under a candidate scorer beside the active one",
        description="Replay a frozen cohort of recorded runs (an evaluation's, or the runs "
        "finished at a log position) under CANDIDATE and the scorer it would replace, side "
        "by side, without changing the active scorer. Every reported issue lands in one "
        "bucket: unchanged, newly credited, newly uncredited, credited elsewhere, or "
        "diverged with the reason (judge unreachable, judge answer unreadable, run "
        "unscorable, version mismatch). Also: recall per critic before and after, agreement "
        "with the labelled grading cases and with people's verdicts (with intervals), the "
        "cost. Records `scorer.verified`. A judge's answers are recorded as they come: run "
        "again after an interruption, it asks only what it has no answer for. Exit 0 only "
        "when the verification completed, 3 otherwise.")
    p.add_argument("candidate", help="NAME@VERSION, e.g. judge@1")
    p.add_argument("--against", metavar="SCORER",
                   help="NAME@VERSION to set it beside (default: the active scorer, else "
                   "the default scorer)")
    cohort = p.add_mutually_exclusive_group()
    cohort.add_argument("--cohort", metavar="EVAL", type=arguments.name,
                        help="an evaluation's runs (default: the newest evaluation)")
    cohort.add_argument("--as-of", type=arguments.non_negative_int, metavar="POSITION",
                        help="every critic run finished at or before this log position")
    p.add_argument("--labels", type=Path, metavar="DIR",
                   help="a folder of labelled grading cases (default: the bundled ones)")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="scoring:verify_cmd", connections=3)


def _selectors(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", action="append", type=arguments.run_ref, metavar="RUN_ID",
                   help="a run id, or a unique prefix of one (repeatable)")
    p.add_argument("--since", type=datetime.fromisoformat, help="requested at or after (ISO)")
    p.add_argument("--until", type=datetime.fromisoformat, help="requested before (ISO)")
    p.add_argument("--model", help="only runs of this model")
    p.add_argument("--definition", help="only runs of this critic definition")
    p.add_argument("--snapshot", help="PROJECT/YYYY-MM-DD-NN")
    p.add_argument("--all", action="store_true", help="every recorded critic run")

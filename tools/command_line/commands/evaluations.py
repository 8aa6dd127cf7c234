"""`props eval run|show|list`: evaluations as the unit of work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from props.tools.command_line import arguments

EXIT_INCOMPLETE = 3  # an evaluation with a case that is neither scored nor excluded


def _at_least_zero(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text} is not a number from 0 to 1,000,000")
    return value


def _retries(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text} is not a count from 0 to 100")
    return value


def add_parser(sub: Any) -> None:
    ev = sub.add_parser(
        "eval", help="evaluations: run a plan of critics x examples x epochs, show, list",
        description="An evaluation is a recorded plan (a TOML file: name, examples, epochs, "
        "max_concurrency, budget_usd, timeout_seconds, [[critic]] definition and model) "
        "whose cases each end in one state: scored, failed (with its closed failure fact), "
        "excluded, or missing (broken). Running the same plan again requests only what has "
        f"no result. Exit 0 when every case is scored or excluded, {EXIT_INCOMPLETE} when one "
        "is not (the table says which and why).")
    cmds = ev.add_subparsers(dest="eval_command", metavar="ACTION", required=True)
    p = cmds.add_parser("run", help="record the plan, run every case without a result, report",
                        description="Record PLAN (or resume it: the same plan under its name "
                        "requests only what has no result), request its cases within the "
                        "ceiling in force (the plan's max_concurrency, the launcher's "
                        "capacity, each model's max_connections), serve the reactors in this "
                        "process until every case is done, and print the evaluation's "
                        "report. A plan changed under a recorded name is refused (65) unless "
                        "--new-version.")
    p.add_argument("plan", type=Path, metavar="PLAN.toml", help="the evaluation's plan")
    p.add_argument("--detach", action="store_true",
                   help="record and request only: `props serve` does the work and `props "
                   "eval show NAME` follows it")
    p.add_argument("--new-version", action="store_true",
                   help="record a changed plan as the evaluation's next version")
    p.add_argument("--fail-on-error", type=_at_least_zero, metavar="N|FRACTION",
                   help="stop starting runs past this many failed cases (or this fraction "
                   "of the cases, below 1)")
    p.add_argument("--retry-failed", type=_retries, default=0, metavar="N",
                   help="request a failed case again, up to N times, when it may pass: "
                   "retryable by its failure's fact, or failed at launch before anything "
                   "ran (a new run of the same case; its earlier runs stay in the record). "
                   "Says how many it requested again and why the others were not")
    p.add_argument("--runtime", default="auto", metavar="NAME",
                   help="where the runs' containers run when served here: auto (the "
                   "default), docker, local or a registered runtime's name")
    p.add_argument("--wait", type=_at_least_zero, default=3600, metavar="SECONDS",
                   help="give up waiting for the cases after this long (default 3600): "
                   "those not done are reported missing")
    p.add_argument("--agent-env", action="append", metavar="NAME",
                   help="a variable of this environment that a definition may name for its "
                   "runs (api_key_env), e.g. OPENAI_API_KEY; repeat for more (added to "
                   "agent_env of the service's settings: PROPS_AGENT_ENV, the config file). "
                   "Nothing else of this environment reaches a run; PROPS_* and PG* never can")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="evaluations:run_cmd", connections=8)
    p = cmds.add_parser("show", help="every case of an evaluation and its state",
                        description="The evaluation's latest version: each case's state "
                        "(scored, running, waiting, failed with its fact, excluded, missing), "
                        "spend, and recall and precision per critic under the active scorer. "
                        f"Exit 0 when complete, {EXIT_INCOMPLETE} otherwise.")
    p.add_argument("name", type=arguments.name, help="the evaluation's name")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="evaluations:show_cmd", connections=4)
    p = cmds.add_parser(
        "compare", help="two critics, of one evaluation or of two, on the examples both scored",
        description="B against A under the active scorer: recall and precision of each over "
        "the examples (snapshot and file set) both scored, and B minus A with a paired "
        "cluster bootstrap over those examples (the interval every props figure has). "
        "EVAL compares each critic two evaluations share; EVAL:DEFINITION names one critic "
        "(both sides then). Examples only one side scored are counted, never paired.")
    p.add_argument("a", metavar="A", help="EVAL or EVAL:DEFINITION")
    p.add_argument("b", metavar="B", help="EVAL or EVAL:DEFINITION")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="evaluations:compare_cmd", connections=4)
    p = cmds.add_parser("watch", help="follow an evaluation another process runs, to its end",
                        description="After `props eval run --detach`, while `props serve` does "
                        "the work: print a line as the cases move until every one is done "
                        "(or --wait runs out), then the evaluation's report, as `show` prints "
                        f"it. Requests nothing. Exit 0 when complete, {EXIT_INCOMPLETE} "
                        "otherwise.")
    p.add_argument("name", type=arguments.name, help="the evaluation's name")
    p.add_argument("--wait", type=_at_least_zero, default=3600, metavar="SECONDS",
                   help="stop following after this long (default 3600)")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="evaluations:watch_cmd", connections=4)
    p = cmds.add_parser("list", help="every evaluation: versions, cases and where they stand")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="evaluations:list_cmd", connections=4)

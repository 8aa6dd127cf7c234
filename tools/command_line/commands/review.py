"""`props review next|confirm|correct|exclude`: people's verdicts, as events.

A verdict (`grade.reviewed`, in the run's `review-<run>` stream) names the reviewer and the
match they give an issue; it is a grade of the `human@1` scorer and never overwrites a rule
scorer's grade, so `props compare human@1 tiered@2` says how well the rule agrees with
people. `exclude` records `run.excluded`: the run leaves every score, counted with its reason."""

from __future__ import annotations

import getpass
from typing import Any

from props.tools.command_line import arguments


def add_parser(sub: Any) -> None:
    r = sub.add_parser("review", help="people's verdicts on grades, and runs that must not count",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    cmds = r.add_subparsers(dest="review_command", metavar="ACTION", required=True)
    p = cmds.add_parser("next", help="the next grade no person has judged yet",
                        description="Show the oldest grade under the scorer (default: the "
                        "active one) of an issue without a verdict: the issue as reported, "
                        "the match, and the defect's or decoy's own lines.")
    p.add_argument("--scorer", help="NAME@VERSION (default: the active scorer)")
    arguments.add_format(p, ("table", "json"))
    p.set_defaults(handler="review:next_cmd", connections=2)
    for name, text in (("confirm", "agree with a scorer's grade of one issue"),
                       ("correct", "give one issue the match it should have had")):
        p = cmds.add_parser(name, help=text, description=text[0].upper() + text[1:] +
                            ": a grade.reviewed event naming you; no grade is overwritten.")
        p.add_argument("run_id", type=arguments.run_ref, metavar="RUN_ID",
                       help="the critic run (its id, or a unique prefix of it)")
        p.add_argument("issue_id", metavar="ISSUE_ID", help="the issue, as the run reported it")
        p.add_argument("--reviewer", default=getpass.getuser(),
                       help="who judges (default: your user name)")
        p.add_argument("--note", default="", help="why, for whoever reads the verdict")
        if name == "confirm":
            p.add_argument("--scorer", help="whose grade (default: the active scorer)")
            p.set_defaults(handler="review:confirm_cmd", connections=2)
        else:
            match = p.add_mutually_exclusive_group(required=True)
            match.add_argument("--tp", metavar="ID[#N]", help="the TP (occurrence N, default 1)")
            match.add_argument("--fp", metavar="ID", help="a known decoy")
            match.add_argument("--none", action="store_true", help="nothing known")
            p.set_defaults(handler="review:correct_cmd", connections=2)
    p = cmds.add_parser("exclude", help="leave a run out of every score, with a reason",
                        description="Record run.excluded: the run leaves every score from now "
                        "on and is counted as excluded in reports, with the reason.")
    p.add_argument("run_id", type=arguments.run_ref, metavar="RUN_ID",
                   help="the critic run (its id, or a unique prefix of it)")
    p.add_argument("--reason", required=True,
                   help="why the run must not count (kept in the log with the event)")
    p.add_argument("--by", default=getpass.getuser(), help="who excludes it")
    p.set_defaults(handler="review:exclude_cmd", connections=2)

"""`props report`: recall and precision per model, definition and scorer, from projections
(the figures are `props.projections.figures`'s; this module prints them).

It says how many runs lack evidence (never finished) or could not be scored, instead of
quietly leaving them out of the figures."""

from __future__ import annotations

from typing import Any

from props.tools.command_line import arguments

DEFINITIONS = """\
confirmed recall (the first figure): the TP occurrences in scope that an issue found and a
judge or a person confirmed (said the issue describes that defect), over every TP occurrence
in scope; "unreviewed (N)" while nobody has looked at the row's N candidates, never 0%.

located recall: the TP occurrences in scope that an issue found (a match at full credit:
overlapping lines for the location scorers) over every TP occurrence in scope, pooled over
the runs: candidates, never called recall. Marked with a down arrow where it is below its
chance level (what the same issues would get anywhere in their files). graded located: the
same with partial credit counted (tiered gives near 0.6, same file 0.3).

precision: issues that found a TP over issues graded. partial: issues matched to a TP with
partial credit only (not finds). known FP: issues matched to a known decoy.

only completed runs count: a run that failed (the event cap included), timed out, ran over
its budget or was cancelled is in no figure, and is counted apart.

intervals: a cluster bootstrap over examples (snapshot and file set), so repeated runs of one
example do not narrow them; none with fewer than two examples. A cell reads 17.6% +-20.0
(half the interval's width); --wide, json and csv give the exact bounds."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="confirmed and located recall, precision per model, definition, scorer",
        description="Confirmed and located recall (TP occurrences found over those in scope) "
        "and precision (issues matching a TP over graded issues) per model, critic "
        "definition and scorer, with "
        "95% intervals, from the projections (run `props projections run` or "
        "`rebuild` first). Runs without a finish event and finished runs nobody graded are "
        "counted and reported, never silently left out, and so are runs that came in from "
        "imported export files (by the key that signed them, or 'unsigned').\n\n"
        + DEFINITIONS,
    )
    arguments.add_format(p)
    p.add_argument("--scorer", help="only this scorer, NAME or NAME@VERSION")
    scope = p.add_argument_group(
        "scope", "only some runs (each figure, count and interval over those alone)")
    scope.add_argument("--eval", dest="evaluation", metavar="NAME", type=arguments.name,
                       help="the runs `props eval show NAME` counts: each case's latest attempt")
    scope.add_argument("--model", type=arguments.name, help="the runs of this model")
    scope.add_argument("--definition", type=arguments.name,
                       help="the runs of this critic definition")
    scope.add_argument("--snapshot", type=arguments.name, help="the runs on this snapshot")
    p.add_argument("--exclude-imported", action="store_true",
                   help="leave out the runs that came in from imported export files")
    p.add_argument("--adjudicated", action="store_true",
                   help="where a person gave an issue a verdict (props review), use it "
                        "instead of the scorer's grade")
    p.add_argument("--as-of", metavar="POINT",
                   help="report from the events up to POINT only: TX:POSITION (every report "
                        "prints the point it stands at), a global position, or an ISO 8601 "
                        "time with its zone (what this database had recorded by then: an "
                        "imported event counts from its import, not from the time it "
                        "carries); the projections are folded again for this "
                        "report, in temporary tables, so a figure quoted months ago comes "
                        "back exactly (same output, byte for byte)")
    p.set_defaults(handler="report:report_cmd", connections=2)

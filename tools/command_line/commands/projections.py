"""`props projections ...`: run the projection runner, show status, rebuild."""

from __future__ import annotations

from typing import Any

from props.projections import names
from props.tools.command_line import arguments


def add_parser(sub: Any) -> None:
    pj = sub.add_parser("projections", help="the analysts' tables: run, status, rebuild",
                        description="Projections are tables derived from the log only "
                        f"(schema `{names.LIVE}`): " + ", ".join(names.NAMES)
                        + ".")
    cmds = pj.add_subparsers(dest="projections_command", metavar="ACTION", required=True)
    p = cmds.add_parser("run", help="keep every projection current (a service)",
                        description="Follow the log and keep every projection current until "
                        "SIGTERM or Ctrl-C. Builds a projection from the log first if it has "
                        "never been built (or its version changed). One runner is active per "
                        "database; a second one waits to take over.")
    p.set_defaults(handler="projections:run_cmd", connections=4)
    p = cmds.add_parser("status", help="checkpoints, lag, and what holds the fence",
                        description="Each projection's checkpoint, lag (events and seconds "
                        "behind the log) and the events it parked (could not fold, and skips), "
                        "and any long transaction holding the fence back.")
    arguments.add_format(p)
    p.set_defaults(handler="projections:status_cmd", connections=2)
    p = cmds.add_parser("rebuild", help="rebuild projections from the log, then swap",
                        description="Build the projection(s) again from the whole log beside "
                        "the live tables, catch up, and swap atomically: readers see the old "
                        "rows until the swap. An interrupted rebuild resumes where it stopped.")
    _chosen(p, "projections to rebuild", "rebuild every projection")
    _reader_grace(p)
    p.set_defaults(handler="projections:rebuild_cmd", connections=4)
    p = cmds.add_parser("sql", help="print the SQL a projection runs",
                        description="Print the statements the projection runs, as the "
                        "runner generates them from its tables and row maps: each table's "
                        "definition, the fold of each event type the server folds (with what "
                        "its parameters are), and the statements of its derived tables. "
                        "Reads no database.")
    p.add_argument("name", choices=names.NAMES, metavar="NAME",
                   help=f"the projection ({', '.join(names.NAMES)})")
    p.set_defaults(handler="projections:sql_cmd")
    p = cmds.add_parser("retry-parked", help="take parked events up again (after an upgrade)",
                        description="A projection that could not fold an event parked it "
                        "(`props projections status` counts them) and folded the rest. After "
                        "an upgrade that can fold them, this records that they are no longer "
                        "skipped and rebuilds the projection(s): what still cannot be folded "
                        "is parked again.")
    _chosen(p, "projections whose parked events to retry", "every projection's")
    _reader_grace(p)
    p.set_defaults(handler="projections:retry_parked_cmd", connections=4)


def _chosen(p: Any, what: str, every: str) -> None:
    """NAME... or --all (the handler refuses neither and both)."""
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"{what} ({', '.join(names.NAMES)})")
    p.add_argument("--all", action="store_true", help=every)


def _reader_grace(p: Any) -> None:
    p.add_argument("--reader-grace", type=arguments.seconds(86_400), metavar="SECONDS",
                   default=names.READER_GRACE_SECONDS,
                   help="how long the swap waits for analysts' transactions that hold the "
                   "live tables before it ends their sessions, saying which (default "
                   f"{names.READER_GRACE_SECONDS:g}; at most a day)")

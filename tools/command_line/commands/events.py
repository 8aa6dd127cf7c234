"""`props events ...`: append an event from JSON, tail the log live."""

from __future__ import annotations

from typing import Any

from props.tools.command_line import arguments

APPEND_HELP = """\
Append events given as JSON (a file, or - for stdin). Each event is an object
  {"stream": "run-<uuid>", "type": "phase.completed", "data": {...},
   "metadata": {...}, "event_id": "<uuid>"}
(event_id is optional: give it to make a retry append nothing)
or a list of such objects for one stream (appended atomically). The data is validated
against the event type's schema; nothing is written if any event is invalid.
"""


def add_parser(sub: Any) -> None:
    ev = sub.add_parser("events", help="append to and follow the log",
                        description="Append events to the log and watch it move.")
    cmds = ev.add_subparsers(dest="events_command", metavar="ACTION", required=True)
    p = cmds.add_parser("append", help="append events from a JSON file or stdin",
                        description=APPEND_HELP)
    p.add_argument("file", nargs="?", default="-", help="JSON file, or - for stdin (default)")
    p.add_argument("--expected-version", type=int, default=None, metavar="N",
                   help="refuse unless the stream is at version N (0: must not exist yet)")
    p.set_defaults(handler="events:append_cmd", connections=2)
    p = cmds.add_parser("tail", help="print events as they are appended",
                        description="Print the log's events in read order, then follow it "
                        "live (Ctrl-C stops). Positions are TX:POSITION checkpoints.")
    p.add_argument("--from", dest="start", metavar="WHERE",
                   help="'start', 'end' or a TX:POSITION checkpoint (default: 'end', only new "
                        "events, when following; 'start' with --no-follow, which prints the "
                        "log so far)")
    p.add_argument("--category", help="only streams of this category (e.g. run)")
    p.add_argument("--no-follow", action="store_true",
                   help="stop when caught up instead of following")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(handler="events:tail_cmd", connections=3)
    p = cmds.add_parser("types", help="list the event types of the catalog",
                        description="List every event type of the catalog with its schema version "
                        "and fields: the `type` and `data` keys that `props events append` "
                        "takes.")
    arguments.add_format(p)
    p.set_defaults(handler="events:types_cmd")

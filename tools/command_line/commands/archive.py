"""`props export`, `props import`, `props verify`: ranges of the log as verifiable files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from props.tools.command_line import arguments

FORMAT_HELP = """\
The file is zstd-compressed JSON lines (a header, the referenced blobs, the events, and a
manifest with counts, the first and last event, a sha256 of the content and the head of a
hash chain across events). Each event is an array of the header's `event_fields`, its
position and tx_id as steps from the previous event's, its time null when unchanged. Read it
without props: `zstd -dc FILE | jq -c 'select(type == "array") | {type: .[5], stream_id:
.[3]}'` (docs/howto/export.md sums the steps into positions).
"""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("export", help="write a range of the log to a verifiable file",
                       description="Export committed events of a range, with the blobs they "
                       "reference, streaming, in constant memory.\n\n" + FORMAT_HELP)
    p.add_argument("-o", "--output", type=Path, required=True, help="the file to write")
    p.add_argument("--from", dest="from_position", type=int, default=1, metavar="POS",
                   help="first global position (default 1)")
    p.add_argument("--to", dest="to_position", type=int, metavar="POS",
                   help="last global position (default: the end)")
    p.add_argument("--since", type=datetime.fromisoformat, help="recorded at or after (ISO)")
    p.add_argument("--until", type=datetime.fromisoformat, help="recorded before (ISO)")
    p.add_argument("--category", action="extend", type=arguments.categories,
                   help="only these stream categories (repeat the flag, or separate them with "
                   "commas; a category no event is in is refused)")
    p.add_argument("--eval", dest="evaluation", metavar="NAME", type=arguments.name,
                   help="only what this evaluation needs to be read alone: its plans and "
                   "endings, its runs with their grades, the snapshots they ran on, the "
                   "definitions and scorers")
    p.add_argument("--exclude-category", action="extend", type=arguments.categories,
                   help="leave these out (e.g. snapshot, to leave ground truth out; as "
                   "--category)")
    p.add_argument("--sign", metavar="KEY",
                   help="sign the file with this key (a name in $PROPS_HOME/keys, or the path "
                        "of a .key file; see `props keys create`)")
    p.set_defaults(handler="archive:export_cmd", connections=3)
    _add_import(sub)
    p = sub.add_parser("verify", help="check an export file without a database",
                       description="Check an export file's manifest, hash chain and blobs; "
                       "exit 65 naming what failed and where.\n\n" + FORMAT_HELP)
    p.add_argument("file", type=Path, help="an export file (.jsonl.zst)")
    p.add_argument("--trusted-keys", type=Path, metavar="DIR",
                   help="also require a signature by one of the public keys in DIR")
    p.add_argument("--allow-unknown", action="store_true",
                   help="events of types this props does not know are not a failure")
    p.set_defaults(handler="archive:verify_cmd")
    p = sub.add_parser(
        "archive", help="move old partitions of the log to verified files",
        description="Archive the hot partitions of the log that end at or before POS: each "
        "is exported to DIR/<partition>.jsonl.zst (the export format), read back and "
        "verified, and only then detached and dropped; a failure at any step leaves it in "
        "the table. Projections are not touched. A partition stays (and the output says "
        "why) when it holds events other than critic runs, grades and judge calls, or "
        "events of a run under a retention hold (props runs hold); archival stops at events "
        "a consumer has not read yet. `props import FILE` puts a partition back, at its "
        "original positions.\n\n" + FORMAT_HELP)
    p.add_argument("--before", type=int, metavar="POS",
                   help="archive partitions that end at or before this position")
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="where the files go")
    p.add_argument("--status", action="store_true",
                   help="list the partitions: positions, hot or archived, events, file")
    arguments.add_format(p)
    p.set_defaults(handler="archive:archive_cmd", connections=3, owner=True)


def _add_import(sub: Any) -> None:
    p = sub.add_parser("import", help="verify an export file, then append what is missing",
                       description="Verify the whole file (manifest, hash chain, blob "
                       "hashes) and write nothing unless it is intact; then append its "
                       "events with their ids and stream versions (new positions, the origin "
                       "position in metadata). An import adds: a file with an event that "
                       "would act on this database's own streams or runs is refused, naming "
                       "its line (docs/reference/imports.md); the origin's records of its own "
                       "consumers (its scorer activation, parks, holds) are kept as history "
                       "that acts on nothing here. A database nothing has migrated yet is "
                       "migrated first, and projections never built are built. Importing twice "
                       "changes nothing; an interrupted import finishes when run again. The "
                       "file of a partition that `props archive` moved out of this database "
                       "restores it instead: "
                       "every event back at its original position.\n\n" + FORMAT_HELP)
    p.add_argument("file", type=Path, help="an export file (.jsonl.zst)")
    p.add_argument("--trusted-keys", type=Path, metavar="DIR",
                   help="accept only a file signed by one of the public keys (*.pub) in DIR")
    p.add_argument("--allow-unknown", action="store_true",
                   help="take events of types this props does not know as they are (known "
                        "types are always checked against the catalog)")
    p.add_argument("--inert", action="store_true",
                   help="keep the events that would act on this database's own streams "
                        "or runs (appends to its streams, grades, exclusions or holds of its "
                        "runs) as inert history that nothing acts on, instead of refusing the "
                        "file (exit 65, naming the line)")
    p.add_argument("--adopt-snapshots", action="store_true",
                   help="let the snapshot versions the file brings grade this database's "
                        "own runs too (by default they grade only the runs it brings)")
    p.add_argument("--untrusted", action="store_true",
                   help="where this deployment trusts signers (props keys trusted), take a "
                        "file none of them signed whole as inert history that nothing reads "
                        "(by default it is refused, exit 65): it takes no run id, evaluation "
                        "or name that a trusted file may bring")
    p.set_defaults(handler="archive:import_cmd", connections=3, owner=True, migrate_new=True)

"""`props export`, `props import`, `props verify`: ranges of the log as verifiable files."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
from rich.progress import Progress, TextColumn

from props.core.domain import archival, exports, imports, signing
from props.core.domain.store import open_store
from props.core.log import database, errors
from props.tools import progress
from props.tools.commands import keys as key_commands
from props.tools.render import Console, Table

console = Console(highlight=False)

FORMAT_HELP = """\
The file is zstd-compressed JSON lines (a header, the referenced blobs, the events, and a
manifest with counts, the first and last event, a sha256 of the content and the head of a
hash chain across events). Read it without props: `zstd -dc FILE | jq -c 'select(.kind ==
"event")'`, or DuckDB: `SELECT * FROM read_json('FILE', format='newline_delimited')`.
"""


def add_parsers(sub: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("export", help="write a range of the log to a verifiable file",
                       description="Export committed events of a range, with the blobs they "
                       "reference, streaming, in constant memory.\n\n" + FORMAT_HELP,
                       formatter_class=raw)
    p.add_argument("-o", "--output", type=Path, required=True, help="the file to write")
    p.add_argument("--from", dest="from_position", type=int, default=1, metavar="POS",
                   help="first global position (default 1)")
    p.add_argument("--to", dest="to_position", type=int, metavar="POS",
                   help="last global position (default: the end)")
    p.add_argument("--since", type=datetime.fromisoformat, help="recorded at or after (ISO)")
    p.add_argument("--until", type=datetime.fromisoformat, help="recorded before (ISO)")
    p.add_argument("--category", action="append", help="only these stream categories")
    p.add_argument("--exclude-category", action="append",
                   help="leave these out (e.g. snapshot, to leave ground truth out)")
    p.add_argument("--sign", metavar="KEY",
                   help="sign the file with this key (a name in $PROPS_HOME/keys, or the path "
                        "of a .key file; see `props keys create`)")
    p.set_defaults(handler=export_cmd)
    p = sub.add_parser("import", help="verify an export file, then append what is missing",
                       description="Verify the whole file (manifest, hash chain, blob "
                       "hashes) and write nothing unless it is intact; then append its "
                       "events with their ids and stream versions (new positions, the origin "
                       "position in metadata). Importing twice changes nothing; an "
                       "interrupted import finishes when run again. The file of a partition "
                       "that `props archive` moved out of this database restores it instead: "
                       "every event back at its original position.\n\n" + FORMAT_HELP,
                       formatter_class=raw)
    p.add_argument("file", type=Path, help="an export file (.jsonl.zst)")
    p.add_argument("--trusted-keys", type=Path, metavar="DIR",
                   help="accept only a file signed by one of the public keys (*.pub) in DIR")
    p.add_argument("--allow-unknown", action="store_true",
                   help="take events of types this props does not know as they are (known "
                        "types are always checked against the catalog)")
    p.set_defaults(handler=import_cmd)
    p = sub.add_parser("verify", help="check an export file without a database",
                       description="Check an export file's manifest, hash chain and blobs; "
                       "exit 65 naming what failed and where.\n\n" + FORMAT_HELP,
                       formatter_class=raw)
    p.add_argument("file", type=Path, help="an export file (.jsonl.zst)")
    p.add_argument("--trusted-keys", type=Path, metavar="DIR",
                   help="also require a signature by one of the public keys in DIR")
    p.add_argument("--allow-unknown", action="store_true",
                   help="events of types this props does not know are not a failure")
    p.set_defaults(handler=verify_cmd)
    p = sub.add_parser(
        "archive", help="move old partitions of the log to verified files",
        description="Archive the hot partitions of the log that end at or before POS: each "
        "is exported to DIR/<partition>.jsonl.zst (the export format), read back and "
        "verified, and only then detached and dropped; a failure at any step leaves it in "
        "the table. Projections are not touched. A partition stays (and the output says "
        "why) when it holds events other than critic runs, grades and judge calls, or "
        "events of a run under a retention hold (props runs hold); archival stops at events "
        "a consumer has not read yet. `props import FILE` puts a partition back, at its "
        "original positions.\n\n" + FORMAT_HELP, formatter_class=raw)
    p.add_argument("--before", type=int, metavar="POS",
                   help="archive partitions that end at or before this position")
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="where the files go")
    p.add_argument("--status", action="store_true",
                   help="list the partitions: positions, hot or archived, events, file")
    p.set_defaults(handler=archive_cmd)


async def export_cmd(args: argparse.Namespace) -> int:
    selection = exports.Selection(
        after_position=max(0, args.from_position - 1), to_position=args.to_position,
        since=args.since, until=args.until,
        categories=tuple(args.category) if args.category else None,
        exclude_categories=tuple(args.exclude_category) if args.exclude_category else None)
    key = None if args.sign is None else signing.load_private(
        args.sign, key_commands.keys_dir(None))
    if not args.output.parent.is_dir():
        raise errors.ConfigurationError(f"cannot write {args.output}: no folder "
                                        f"{args.output.parent}")
    async with open_store(max_connections=3) as store:
        total = await store.pool.fetchval("SELECT count(*) FROM props.events "
                                          "WHERE global_position > $1", selection.after_position)
        with progress.counting_events("exporting", total) as advance:
            report = await exports.export(store, selection, args.output, progress=advance,
                                          sign_with=key)
    console.print(f"exported {report.events:,} event(s) and {report.blobs:,} blob(s) to "
                  f"{args.output} ({report.bytes_out:,} bytes, from {report.bytes_in:,} bytes "
                  f"of event JSON)")
    return 0


async def import_cmd(args: argparse.Namespace) -> int:
    # As the owner: an archive file of this database restores its partition, which only the
    # owner's function may do.
    async with open_store(database.resolve_dsn(), max_connections=3) as store:
        with progress.counting_events("importing") as advance:
            report = await imports.import_archive(
                store, args.file, progress=advance,
                trusted=_trusted(args.trusted_keys), allow_unknown=args.allow_unknown)
    if report.restored:
        console.print(f"verified {report.events:,} event(s); restored the archived partition "
                      f"{report.restored}: {report.imported:,} event(s) back at their "
                      f"original positions")
        return 0
    console.print(f"verified {report.events:,} event(s); imported {report.imported:,}, "
                  f"{report.already_present:,} already present; {report.blobs:,} blob(s)")
    console.print(f"signed by: {report.signer or 'nobody (unsigned)'}")
    return 0


def _trusted(directory: Path | None) -> list[signing.PublicKey] | None:
    if directory is None:
        return None
    keys = signing.public_keys(directory)
    if not keys:
        raise errors.ConfigurationError(f"{directory} holds no public key (*.pub): no file "
                                        f"could be trusted")
    return keys


async def archive_cmd(args: argparse.Namespace) -> int:
    # As the owner: detaching and dropping partitions is the owner's, never the service's.
    async with open_store(database.resolve_dsn(), max_connections=3) as store:
        if args.status:
            _print_partitions(await archival.partitions(store))
            return 0
        if args.before is None or args.output is None:
            raise errors.PropsError("give --before POS and -o DIR (or --status)")
        with Progress(TextColumn("archiving {task.description}", markup=False),
                      console=Console(stderr=True),
                      transient=True) as bar:
            task = bar.add_task("", total=None)
            report = await archival.archive_before(
                store, args.before, args.output,
                progress=lambda name: bar.update(task, description=name))
    for done in report.archived:
        console.print(f"archived {done.partition} (positions {done.from_position}-"
                      f"{done.to_position - 1}): {done.events:,} event(s) -> {done.file}")
    for kept in report.kept:
        console.print(f"kept {kept.partition} (positions {kept.from_position}-"
                      f"{kept.to_position - 1}): {kept.why}")
    if report.stopped:
        console.print(report.stopped)
    if not (report.archived or report.kept or report.stopped):
        console.print(f"no hot partition ends at or before position {args.before}")
    return 0


def _print_partitions(rows: list[dict[str, Any]]) -> None:
    table = Table("partition", "positions", "state", "events", "archive file")
    for r in rows:
        events = r["hot_events"] if r["state"] == "hot" else r["events"]
        table.add_row(r["name"], f"{r['from_position']}-{r['to_position'] - 1}", r["state"],
                      f"{events:,}", r["archive_file"] or "")
    console.print(table)


async def verify_cmd(args: argparse.Namespace) -> int:
    verified = await anyio.to_thread.run_sync(
        lambda: exports.verify(args.file, allow_unknown=args.allow_unknown))
    signer = signing.signer(verified.manifest, _trusted(args.trusted_keys))
    console.print(f"{args.file}: intact: {verified.events:,} event(s), {verified.blobs:,} "
                  f"blob(s), chain {verified.manifest['chain'][:16]}, signed by "
                  f"{signer or 'nobody (unsigned)'}")
    return 0

"""What `props archive` does: the handlers that the parsers of
`props.tools.command_line.commands.archive` name."""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio.to_thread
from rich.progress import Progress, TextColumn
from rich.text import Text

from props.core.domain import evaluations
from props.core.domain.archive import archival, exports, imports, signing
from props.core.domain.store import open_store
from props.core.log import errors
from props.core.log.store import EventStore
from props.projections import engine
from props.projections import status as projection_status
from props.tools.command_line import progress, render
from props.tools.command_line.handlers import keys as key_handlers
from props.tools.command_line.render import Column, Console

console = Console(highlight=False)




async def export_cmd(args: argparse.Namespace, store: EventStore) -> int:
    ids = prefixes = None
    if args.evaluation is not None:
        ids, prefixes = await evaluations.export_streams(store, args.evaluation)
    selection = exports.Selection(
        after_position=max(0, args.from_position - 1), to_position=args.to_position,
        since=args.since, until=args.until,
        categories=tuple(args.category) if args.category else None,
        exclude_categories=tuple(args.exclude_category) if args.exclude_category else None,
        evaluation=args.evaluation, stream_ids=ids, stream_prefixes=prefixes)
    key = None if args.sign is None else signing.load_private(
        args.sign, key_handlers.keys_dir(None))
    if not args.output.parent.is_dir():
        raise errors.ConfigurationError(f"cannot write {args.output}: no folder "
                                        f"{args.output.parent}")
    # (an evaluation's streams are a part of the log nobody counted: a count, not a bar)
    total = None if ids is not None else await store.reader.count(selection.after_position)
    with progress.counting_events("exporting", total) as advance:
        report = await exports.export(store, selection, args.output, progress=advance,
                                      sign_with=key)
    console.print(f"exported {report.events:,} event(s) and {report.blobs:,} blob(s) to "
                  f"{args.output} ({report.bytes_out:,} bytes, from {report.bytes_in:,} bytes "
                  f"of event JSON)")
    return 0


async def import_cmd(args: argparse.Namespace, store: EventStore) -> int:
    # As the owner: an archive file of this database restores its partition, which only the
    # owner's function may do.
    with progress.counting_events("importing") as advance:
        report = await imports.import_archive(
            store, args.file, progress=advance,
            trusted=_trusted(args.trusted_keys), allow_unknown=args.allow_unknown,
            inert=args.inert, adopt_snapshots=args.adopt_snapshots,
            untrusted=args.untrusted)
    if report.restored:
        console.print(f"verified {report.events:,} event(s); restored the archived partition "
                      f"{report.restored}: {report.imported:,} event(s) back at their "
                      f"original positions")
        return 0
    kept = f"{report.inert:,} kept as history, " if report.inert else ""
    console.print(f"verified {report.events:,} event(s); imported {report.imported:,}, {kept}"
                  f"{report.already_present:,} already present; {report.blobs:,} blob(s)")
    if report.history or report.kept_inert:
        console.print(Text(
            f"the origin's records of its own consumers are history here: "
            f"{_by_type(report.history, 'in their streams')}"
            f"{'; ' if report.history and report.kept_inert else ''}"
            f"{_by_type(report.kept_inert, 'as import.inert')}; they never change this "
            f"database's active scorer, retries or holds (props scorers activate chooses "
            f"yours)"))
    owned = report.inert - sum(report.kept_inert.values())
    if report.trust == "untrusted":
        console.print(f"kept {report.inert:,} event(s) as inert history: no signer this "
                      f"deployment trusts signed the file (props keys trusted); it took no "
                      f"stream, run id or name here")
    elif owned > 0:
        console.print(f"kept {owned:,} event(s) as inert history (they would have acted on "
                      f"this database; nothing acts on them)")
    console.print(f"signed by: {report.signer or 'nobody (unsigned)'}")
    if report.imported:
        # As the service, whose tables the projections are (the owner's would be unreadable
        # to it).
        async with open_store(None, max_connections=4) as service:
            await _projections_after_import(service)
    return 0


def _by_type(counts: dict[str, int], where: str) -> str:
    if not counts:
        return ""
    return ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.items())) + f" ({where})"


async def _projections_after_import(store: EventStore) -> None:
    """A database whose projections were never built (an empty one, imported into) gets
    them built now, so that `props eval show` and `props report` read what came in; one
    that has them is told how far they are behind, if they are (a running service folds
    them)."""
    states = await projection_status.of(store)
    if all(s.checkpoint is None for s in states):
        with progress.counting_events("building the projections",
                                      await store.reader.count()) as advance:
            built = await engine.rebuild(store, engine.ALL, progress=advance)
        console.print(f"built the projections from {built.events:,} event(s)")
        # (a transaction left open elsewhere on the server holds the fence: what it hides
        # is still behind)
        states = await projection_status.of(store)
    never = [s.name for s in states if s.checkpoint is None]
    behind = max((s.lag_events for s in states), default=0)
    if behind or never:
        console.print(f"the projections are {behind:,} event(s) behind: a running `props "
                      f"serve` (or `props projections run`) folds them; `props projections "
                      f"rebuild --all` does it now")


def _trusted(directory: Path | None) -> list[signing.PublicKey] | None:
    if directory is None:
        return None
    keys = signing.public_keys(directory)
    if not keys:
        raise errors.ConfigurationError(f"{directory} holds no public key (*.pub): no file "
                                        f"could be trusted")
    return keys


async def archive_cmd(args: argparse.Namespace, store: EventStore) -> int:
    # As the owner: detaching and dropping partitions is the owner's, never the service's.
    if args.status:
        rows = [{**r, "positions": f"{r['from_position']}-{r['to_position'] - 1}", "events":
                 r["hot_events"] if r["state"] == "hot" else r["events"]}
                for r in await archival.partitions(store)]
        render.emit(args, rows, [
            Column("name", "partition"), Column("positions", "positions"),
            Column("state", "state"), Column("events", "events", justify="right"),
            Column("archive_file", "archive file", optional=True)],
            empty="no partitions")
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


async def verify_cmd(args: argparse.Namespace) -> int:
    verified = await anyio.to_thread.run_sync(
        lambda: exports.verify(args.file, allow_unknown=args.allow_unknown))
    signer = signing.signer(verified.manifest, _trusted(args.trusted_keys))
    console.print(f"{args.file}: intact: {verified.events:,} event(s), {verified.blobs:,} "
                  f"blob(s), chain {verified.manifest['chain'][:16]}, signed by "
                  f"{signer or 'nobody (unsigned)'}, format version {verified.version}")
    return 0

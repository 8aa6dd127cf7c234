"""`props specimens ...`: validate, sync, list and show snapshots with their ground truth."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.progress import Progress

from props.core.domain import specimen_sync, specimens
from props.core.domain.store import open_store
from props.core.log import errors
from props.tools import samples
from props.tools.render import Console, Table

console = Console(highlight=False)

FORMAT_HELP = """\
DIR holds one folder per snapshot, PROJECT/YYYY-MM-DD-NN/, each with a code/ folder (the
snapshot's files) and a ground_truth.toml (true positives [[tp]], known false positives
[[fp]], [file_sets], optional [scopes]); see README, "Specimens". The bundled samples are in
the folder `props specimens samples` prints.
"""


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("specimens", help="snapshots of code and their ground truth",
                        description="Validate specimen directories, record them in the log, "
                        "and look at what is recorded.")
    cmds = sp.add_subparsers(dest="specimens_command", metavar="ACTION", required=True)
    raw = argparse.RawDescriptionHelpFormatter
    p = cmds.add_parser("validate", help="check a specimen directory; write nothing",
                        description="Check every snapshot under DIR and report every problem "
                        "with its file and line. Exit 65 if there is any.\n\n" + FORMAT_HELP,
                        formatter_class=raw)
    p.add_argument("dir", type=Path, help="a folder of specimens (one folder per snapshot)")
    _max_file_bytes(p)
    p.set_defaults(handler=validate_cmd)
    p = cmds.add_parser("sync", help="record a specimen directory in the log",
                        description="Validate DIR, then record each snapshot as a version: "
                        "unchanged ones add nothing, changed ones add a version (the old one "
                        "stays), snapshots gone from DIR are retired.\n\n" + FORMAT_HELP,
                        formatter_class=raw)
    p.add_argument("dir", type=Path, help="a folder of specimens (one folder per snapshot)")
    p.add_argument("--no-retire", action="store_true",
                   help="do not retire snapshots missing from DIR")
    _max_file_bytes(p)
    p.set_defaults(handler=sync_cmd)
    p = cmds.add_parser("list", help="recorded snapshots with versions and counts",
                        description="Every snapshot the log knows: latest version, status, and "
                        "counts of TPs, occurrences, FPs and file sets.")
    p.add_argument("--json", action="store_true", help="one JSON object per snapshot")
    p.set_defaults(handler=list_cmd)
    p = cmds.add_parser("show", help="one snapshot's versions and ground truth",
                        description="The versions of one snapshot and the ground truth of the "
                        "latest (or --version N).")
    p.add_argument("slug", help="PROJECT/YYYY-MM-DD-NN")
    p.add_argument("--version", type=int, help="a version number (default: the latest)")
    p.add_argument("--json", action="store_true", help="the snapshot.synced event as JSON")
    p.set_defaults(handler=show_cmd)
    p = cmds.add_parser("samples", help="print the folder of the bundled sample specimens",
                        description="Print the folder holding the sample specimens shipped "
                        "with props, e.g. `props specimens sync \"$(props specimens samples)\"`.")
    p.set_defaults(handler=samples_cmd)


def _max_file_bytes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-file-bytes", type=int, metavar="N", default=specimens.MAX_FILE_BYTES,
                   help="refuse a snapshot file larger than N bytes (default: 1 MiB)")


def load_valid(directory: Path, max_file_bytes: int = specimens.MAX_FILE_BYTES
               ) -> list[specimens.Specimen]:
    """The specimens under `directory`; every problem printed, one a line, if there are any."""
    try:
        return specimens.load_valid(directory, max_file_bytes)
    except specimens.InvalidSpecimens as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        raise


async def validate_cmd(args: argparse.Namespace) -> int:
    found = load_valid(args.dir, args.max_file_bytes)
    for s in found:
        c = s.counts
        console.print(f"{s.slug}: ok ({c['files']} files, {c['tps']} TPs with "
                      f"{c['occurrences']} occurrences, {c['fps']} FPs, "
                      f"{c['file_sets']} file sets)")
    return 0


async def sync_cmd(args: argparse.Namespace) -> int:
    found = load_valid(args.dir, args.max_file_bytes)
    source = str(args.dir.resolve())
    async with open_store(max_connections=3) as store:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("syncing", total=len(found))

            def step(slug: str) -> None:
                progress.update(task, advance=1, description=f"syncing {slug}")

            report = await specimen_sync.sync(store, source, found,
                                              retire_missing=not args.no_retire, progress=step)
    for label, slugs in (("added", report.added), ("new version", report.updated),
                         ("retired", report.retired), ("unchanged", report.unchanged)):
        for slug in slugs:
            console.print(f"{label}: {slug}")
    console.print(f"{report.appended} event(s) appended")
    return 0


def _row(h: specimen_sync.SnapshotHistory) -> dict[str, Any]:
    latest = h.latest
    gt = latest.ground_truth
    return {
        "slug": h.slug, "version": latest.version, "versions": len(h.versions),
        "status": "retired" if h.retired else "active", "files": len(latest.files),
        "tps": len(gt.true_positives),
        "occurrences": sum(len(tp.occurrences) for tp in gt.true_positives),
        "fps": len(gt.false_positives), "file_sets": len(gt.file_sets),
        "ground_truth_hash": latest.ground_truth_hash,
    }


async def list_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=2) as store:
        known = await specimen_sync.history(store)
    rows = [_row(h) for _slug, h in sorted(known.items()) if h.versions]
    if args.json:
        for row in rows:
            print(orjson.dumps(row).decode())
        return 0
    if not rows:
        console.print("no snapshots recorded: run `props specimens sync DIR`")
        return 0
    table = Table("snapshot", "version", "status", "files", "TPs", "occurrences", "FPs",
                  "file sets", "ground truth")
    for r in rows:
        table.add_row(r["slug"], f"{r['version']} of {r['versions']}", r["status"],
                      str(r["files"]), str(r["tps"]), str(r["occurrences"]), str(r["fps"]),
                      str(r["file_sets"]), r["ground_truth_hash"][:12])
    console.print(table)
    return 0


async def show_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=2) as store:
        known = await specimen_sync.history(store)
    h = known.get(args.slug)
    if h is None or not h.versions:
        raise errors.NotFound(f"no snapshot {args.slug!r} is recorded; "
                                "`props specimens list` shows those that are")
    chosen = h.version(args.version) if args.version else h.latest
    if chosen is None:
        raise errors.PropsError(f"{args.slug} has no version {args.version}; versions: "
                                f"{', '.join(str(v.version) for v in h.versions)}")
    if args.json:
        print(chosen.model_dump_json())
        return 0
    for v, at in zip(h.versions, h.synced_at, strict=True):
        mark = "*" if v is chosen else " "
        console.print(f"{mark} version {v.version}  synced {at:%Y-%m-%d %H:%M}  "
                      f"ground truth {v.ground_truth_hash[:12]}  from {v.source}")
    if h.retired:
        console.print("  retired")
    gt = chosen.ground_truth
    table = Table("kind", "id", "severity", "occurrences", title=f"{args.slug} v{chosen.version}")
    for tp in gt.true_positives:
        table.add_row("TP", tp.id, tp.severity or "", _occurrences(tp.occurrences))
    for fp in gt.false_positives:
        table.add_row("FP", fp.id, "", _occurrences(fp.occurrences))
    console.print(table)
    scopes = {s.files_hash: s for s in gt.scopes}
    sets = Table("file set", "files_hash", "files", "TP occurrences in scope")
    whole = scopes.get(None)
    sets.add_row("(whole snapshot)", "-", str(len(chosen.files)),
                 str(len(whole.occurrences) if whole else 0))
    for fs in gt.file_sets:
        scope = scopes.get(fs.files_hash)
        sets.add_row(fs.name, fs.files_hash, str(len(fs.files)),
                     str(len(scope.occurrences) if scope else 0))
    console.print(sets)
    return 0


def _occurrences(occurrences: list[Any]) -> str:
    return "; ".join(
        ", ".join(f"{loc.file}:" + ",".join(f"{r.start}-{r.end}" for r in loc.ranges)
                  for loc in occ.locations)
        for occ in occurrences
    )


async def samples_cmd(args: argparse.Namespace) -> int:
    print(samples.samples_dir())
    return 0

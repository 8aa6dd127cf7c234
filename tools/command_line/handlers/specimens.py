"""What `props specimens` does: the handlers that the parsers of
`props.tools.command_line.commands.specimens` name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import anyio.to_thread
from rich.progress import Progress

from props.core.domain.specimens import (
    fix_keys,
    git_trees,
    specimen_datasets,
    specimen_format,
    specimen_sync,
    specimens,
    specimens_from_fixes,
)
from props.core.log import errors
from props.core.log.store import EventStore
from props.tools.bundled import samples
from props.tools.command_line import progress, render
from props.tools.command_line.render import Column, Console, print_table

console = Console()




def load_valid(directory: Path, max_file_bytes: int = specimens.MAX_FILE_BYTES
               ) -> list[specimens.Specimen]:
    """The specimens under `directory`; every problem printed, one a line, if there are any."""
    try:
        return specimens.load_valid(directory, max_file_bytes)
    except specimens.InvalidSpecimens as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        raise


def refuse_todos(directory: Path, allow_todo: bool = False) -> None:
    """Refuse `directory` while a ground truth holds a TODO (each printed), unless allowed."""
    todos = [] if allow_todo else specimen_format.todo_problems(directory)
    for line in todos:
        print(line, file=sys.stderr)
    if todos:
        raise errors.InvalidEvent(f"{len(todos)} TODO(s) left in {directory}: a person checks "
                                  f"the key first (or --allow-todo for a draft)")


async def validate_cmd(args: argparse.Namespace) -> int:
    found = load_valid(args.dir, args.max_file_bytes)
    refuse_todos(args.dir, args.allow_todo)
    for s in found:
        c = s.counts
        console.print(f"{s.slug}: ok ({c['files']} files, {c['tps']} TPs with "
                      f"{c['occurrences']} occurrences, {c['fps']} FPs, "
                      f"{c['file_sets']} file sets)")
    return 0


async def sync_cmd(args: argparse.Namespace, store: EventStore) -> int:
    found = load_valid(args.dir, args.max_file_bytes)
    # (as validate: an unchecked key is never recorded by accident)
    refuse_todos(args.dir, args.allow_todo)
    source = str(args.dir.resolve())
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


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    known = await specimen_sync.history(store)
    rows = [_row(h) for _slug, h in sorted(known.items()) if h.versions]
    render.emit(args, rows, [
        Column("slug", "snapshot"),
        Column("version", "version", shows=lambda r: f"{r['version']} of {r['versions']}",
               short="v"),
        Column("versions", "versions", optional=True), Column("status", "status"),
        *(Column(k, h, justify="right", optional=k != "tps") for k, h in (
            ("files", "files"), ("tps", "TPs"), ("occurrences", "occurrences"),
            ("fps", "FPs"), ("file_sets", "file sets"))),
        Column("ground_truth_hash", "ground truth", lambda h: str(h)[:12], optional=True)],
        empty="no snapshots recorded: run `props specimens sync DIR`")
    return 0


async def show_cmd(args: argparse.Namespace, store: EventStore) -> int:
    known = await specimen_sync.history(store)
    h = known.get(args.slug)
    if h is None or not h.versions:
        raise errors.NotFound(f"no snapshot {args.slug!r} is recorded; "
                                "`props specimens list` shows those that are")
    chosen = h.version(args.version) if args.version else h.latest
    if chosen is None:
        raise errors.PropsError(f"{args.slug} has no version {args.version}; versions: "
                                f"{', '.join(str(v.version) for v in h.versions)}")
    if args.format == "json":
        print(chosen.model_dump_json())
        return 0
    for v, at in zip(h.versions, h.synced_at, strict=True):
        mark = "*" if v is chosen else " "
        console.print(f"{mark} version {v.version}  synced {at:%Y-%m-%d %H:%M}  "
                      f"ground truth {v.ground_truth_hash[:12]}  from {v.source}")
    if h.retired:
        console.print("  retired")
    gt = chosen.ground_truth
    print_table(console, [Column("kind", "kind"), Column("id", "id"),
                          Column("severity", "severity", optional=True),
                          Column("where", "occurrences", prose=True)],
                [{"kind": "TP", "id": tp.id, "severity": tp.severity or "",
                  "where": _occurrences(tp.occurrences)} for tp in gt.true_positives]
                + [{"kind": "FP", "id": fp.id, "severity": "",
                    "where": _occurrences(fp.occurrences)} for fp in gt.false_positives],
                wide=args.wide, title=f"{args.slug} v{chosen.version}")
    scopes = {s.files_hash: s for s in gt.scopes}
    whole = scopes.get(None)
    print_table(console, [
        Column("name", "file set"), Column("files_hash", "files_hash", optional=True),
        Column("files", "files", justify="right"),
        Column("in_scope", "TP occurrences in scope", short="TPs in scope",
               justify="right")],
        [{"name": "(whole snapshot)", "files_hash": "-", "files": len(chosen.files),
          "in_scope": len(whole.occurrences) if whole else 0}]
        + [{"name": fs.name, "files_hash": fs.files_hash, "files": len(fs.files),
            "in_scope": len(scopes[fs.files_hash].occurrences)
            if fs.files_hash in scopes else 0} for fs in gt.file_sets], wide=args.wide)
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


async def from_git_cmd(args: argparse.Namespace) -> int:
    skipped: list[str] = []
    snapshot, found, base = await anyio.to_thread.run_sync(
        specimens_from_fixes.from_git, args.repo, args.fix, skipped,
        specimens_from_fixes.defect_filter(args.defect_paths),
        git_trees.snapshot_filter(args.include, args.exclude))
    made_by = f"props specimens from-git {args.repo.name} at {base[:12]}"
    for line in skipped:
        console.print(f"left out of the snapshot: {line}")
    return _wrote(args, snapshot, found, made_by)


async def from_diff_cmd(args: argparse.Namespace) -> int:
    snapshot, found = specimens_from_fixes.from_folders(
        args.buggy, args.fixed, args.id, args.rationale,
        specimens_from_fixes.defect_filter(args.defect_paths),
        git_trees.snapshot_filter(args.include, args.exclude))
    return _wrote(args, snapshot, found, "props specimens from-diff")


def _wrote(args: argparse.Namespace, snapshot: dict[str, str],
           found: list[specimens_from_fixes.Defect], made_by: str) -> int:
    root = fix_keys.write(args.out, args.slug, snapshot, found, made_by)
    load_valid(args.out)  # what it wrote validates (every problem printed otherwise)
    todo = len(specimen_format.todo_problems(root))  # (what validate will count)
    for d in found:
        if not d.ranges:  # (the key says so in a comment; a person reading the output should too)
            console.print(f"left out of the key: fix {d.name!r}: no source line of the "
                          f"snapshot shows it (only tests, docs or CI, or lines that came "
                          f"after it); give its occurrence yourself, or leave it out")
    console.print(f"wrote {root}: {len(snapshot)} file(s), {sum(1 for d in found if d.ranges)} "
                  f"true positive(s) from {len(found)} fix(es), {todo} TODO(s) to check in "
                  f"ground_truth.toml; then `props specimens validate {args.out}` and "
                  f"`props specimens sync {args.out}`")
    return 0


async def from_dataset_cmd(args: argparse.Namespace) -> int:
    read = specimen_datasets.bugsinpy if args.kind == "bugsinpy" else specimen_datasets.swebench
    bugs = [b for b in read(args.source, args.repos) if not args.only or b.id in args.only]
    bugs = bugs[:args.limit] if args.limit else bugs
    made = specimen_datasets.Made()
    is_defect = specimens_from_fixes.defect_filter(args.defect_paths)
    keep = git_trees.snapshot_filter(args.include, args.exclude)
    with progress.counting_events("making snapshots", len(bugs), unit="bugs") as advance:
        for bug in bugs:
            await anyio.to_thread.run_sync(specimen_datasets.make, args.kind, bug, args.out,
                                           is_defect, keep, made)
            advance(1)
    print_table(console, [Column("bug", "bug"), Column("written", "written"),
                          Column("tps", "true positives / why not", prose=True)],
                [{"bug": b, "written": str(root.relative_to(args.out)), "tps": str(tps)}
                 for b, root, tps in made.written]
                + [{"bug": b, "written": "-", "tps": why} for b, why in made.skipped],
                title=f"{args.kind}: {len(made.written)} written, {len(made.skipped)} skipped")
    if made.written:
        load_valid(args.out)  # what it wrote validates (every problem printed otherwise)
        console.print(f"then: review each ground_truth.toml (its TODOs), `props specimens "
                      f"validate {args.out}`, `props specimens sync {args.out}`")
    return 3 if made.skipped else 0

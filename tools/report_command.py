"""`props report`: recall and precision per model, definition and scorer, from projections.

It says how many runs lack evidence (never finished) or could not be scored, instead of
quietly leaving them out of the figures.
"""

from __future__ import annotations

import argparse
import csv
import io
from collections.abc import Callable
from typing import Any

import orjson
from rich.text import Text

from props.core import database, errors, intervals, scoring
from props.core.store import Checkpoint, EventStore
from props.projections import as_of as as_of_point
from props.projections import engine
from props.schema import queries
from props.tools import progress
from props.tools.render import Console, Table

_Q = queries.load("report")
COLUMNS = ["model", "definition", "scorer", "runs", "recall", "recall_low", "recall_high",
           "recall_graded", "precision", "precision_low", "precision_high", "partial",
           "known_fp", "unmatched", "mean_run_recall", "stddev_run_recall", "examples"]
_COUNTS = {"partial", "known_fp", "unmatched"}  # numbers of issues: whole numbers
# The report's set-based queries hash a million grades and issues: in memory, not on disk.
REPORT_WORK_MEM = "64MB"
DEFINITIONS = """\
recall: the TP occurrences in scope that an issue found (a match at full credit: overlapping
  lines for the location scorers) over every TP occurrence in scope, pooled over the runs.
  graded recall: the same with partial credit counted (for each
  occurrence the best grade any issue got: tiered gives near 0.6, same file 0.3). precision:
  issues that found a TP over issues graded. partial: issues matched to a TP with partial
  credit only (not finds). known FP: issues matched to a known decoy. Intervals: a cluster
  bootstrap over examples (snapshot and file set), so repeated runs of one example do not
  narrow them; none with fewer than two examples."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="recall and precision per model, definition and scorer",
        description="Recall (TP occurrences found over those in scope) and precision (issues "
        "matching a TP over graded issues) per model, critic definition and scorer, with "
        "95%% intervals, from the projections (run `props projections run` or "
        "`rebuild` first). Runs without a finish event and finished runs nobody graded are "
        "counted and reported, never silently left out, and so are runs that came in from "
        "imported export files (by the key that signed them, or 'unsigned').\n\n"
        + DEFINITIONS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="a table for people (default), or CSV or JSON for programs")
    p.add_argument("--scorer", help="only this scorer, NAME or NAME@VERSION")
    p.add_argument("--exclude-imported", action="store_true",
                   help="leave out the runs that came in from imported export files")
    p.add_argument("--adjudicated", action="store_true",
                   help="where a person gave an issue a verdict (props review), use it "
                        "instead of the scorer's grade")
    p.add_argument("--wide", action="store_true",
                   help="every column, whatever the terminal's width (below "
                        f"{WIDE_AT} columns the table leaves out graded recall, partial, "
                        "known FP, unmatched and the run recall spread)")
    p.add_argument("--as-of", metavar="POINT",
                   help="report from the events up to POINT only: TX:POSITION (every report "
                        "prints the point it stands at), a global position, or an ISO 8601 "
                        "time with its zone; the projections are folded again for this "
                        "report, in temporary tables, so a figure quoted months ago comes "
                        "back exactly (same output, byte for byte)")
    p.set_defaults(handler=report_cmd)


def scorer_filter(text: str | None) -> tuple[str | None, int | None]:
    if not text:
        return None, None
    name, _, version = text.partition("@")
    try:
        number = int(version) if version else None
    except ValueError:
        raise errors.PropsError(f"--scorer {text!r} is not NAME or NAME@VERSION") from None
    if number is not None and not 1 <= number < 2**31:
        raise errors.PropsError(f"--scorer {text!r}: a version is a number from 1 to "
                                f"{2**31 - 1}")
    return name, number


async def load(store: EventStore, name: str | None = None, version: int | None = None,
               exclude_imported: bool = False, adjudicated: bool = False,
               as_of: str | None = None, advance: engine.Progress | None = None,
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The score rows, and every critic run in exactly one state under the report's scorer
    (`states_scorer`; the counts add up to `critic_runs`), and the scored runs that came
    from imported files (`imported_runs`, `imported_by_<signer>`; left out of the rows with
    `exclude_imported`). An unknown scorer is an error naming the known ones. `as_of`
    (TX:POSITION, a global position or a time): from the events up to that point only, the
    projections folded again for this report; `notes["as_of"]` names the point either way,
    so a quoted figure can be reproduced."""
    exists = await store.pool.fetchval("SELECT to_regclass('projections.model_scores')")
    if exists is None:
        raise errors.SchemaError("the projections are not built yet: run "
                                 "`props projections rebuild --all` (or `run`)")
    point: Checkpoint | None = None
    async with store.pool.acquire() as conn:
        if as_of is None:
            schema = engine.LIVE
        else:
            schema = as_of_point.SCHEMA
            point = await as_of_point.resolve(conn, as_of)
            await as_of_point.build(conn, store, point, advance)
        try:
            # One snapshot for every query (and the live checkpoints): a runner committing
            # meanwhile cannot put two points of the log into one report.
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                records, notes = await _load(conn, schema, name, version, exclude_imported,
                                             adjudicated)
                if point is None:
                    found = await conn.fetch(_Q["live_points"],
                                             [p.checkpoint_name for p in engine.ALL])
                    if len(found) == 1:
                        point = Checkpoint(found[0]["tx_id"], found[0]["position"])
        finally:
            if schema == as_of_point.SCHEMA:
                await conn.execute("DISCARD TEMP")
    notes["as_of"] = None if point is None else str(point)
    return records, notes


async def _load(conn: database.Connection, schema: str, name: str | None,
                version: int | None, exclude_imported: bool, adjudicated: bool,
                ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The report's queries on the projections in `schema`, in the caller's transaction."""
    def q(block: str) -> str:
        return _Q[block].replace("{schema}", schema)

    if name is not None:
        known = sorted({(r["name"], r["version"]) for r in await conn.fetch(q("known_scorers"))}
                       | {(ref.partition("@")[0], int(ref.partition("@")[2]))
                          for ref in scoring.SCORERS})
        if not any(n == name and version in (None, v) for n, v in known):
            raise errors.UnknownScorer(
                f"no scorer {name}{'' if version is None else f'@{version}'} has graded or "
                f"been registered here; known: "
                f"{', '.join(f'{n}@{v}' for n, v in known) or 'none yet'}")
    await conn.execute("SELECT set_config('props.exclude_imported', $1, true), "
                       "set_config('props.adjudicated', $2, true), "
                       f"set_config('work_mem', '{REPORT_WORK_MEM}', true)",
                       "on" if exclude_imported else "off", "on" if adjudicated else "off")
    found = await conn.fetch(q("scores"), name, version)
    rows = [r for r in found if r["whole"]]
    points = [r for r in found if not r["whole"]]
    # With the setting off no grade is replaced: no need to read them all to count none.
    overridden = await conn.fetchval(q("adjudicated_issues"), name, version) \
        if adjudicated else 0
    chosen = await conn.fetchrow(q("report_scorer"), name, version)
    assert chosen is not None
    gaps = await conn.fetchrow(q("evidence_gaps"), chosen["name"], chosen["version"])
    assert gaps is not None
    if sum(gaps[k] for k in gaps.keys() if k != "critic_runs") != gaps["critic_runs"]:
        raise AssertionError(f"run states do not add up: {dict(gaps)}")  # the CASE: never
    imported = {r["signer"]: int(r["runs"])
                for r in await conn.fetch(q("imported_runs"), name, version)} \
        if await conn.fetchval(q("any_imported")) else {}
    examples = _by_group(points)
    records = []
    for r in rows:
        key = (r["model"], r["definition"], r["scorer_name"], r["scorer_version"])
        record: dict[str, Any] = {
            "model": r["model"], "definition": r["definition"],
            "scorer": f"{r['scorer_name']}@{r['scorer_version']}", "runs": r["runs"]}
        for k in COLUMNS[4:-1]:  # the intervals come from the bootstrap, below
            value = r[k] if k in r.keys() else None
            record[k] = None if value is None else int(value) if k in _COUNTS else float(value)
        mine = examples.get(key, [])
        record["examples"] = len(mine)
        record["recall_low"], record["recall_high"] = intervals.ratio_interval(
            [(p["recalled"], p["expected"]) for p in mine])
        record["precision_low"], record["precision_high"] = intervals.ratio_interval(
            [(p["finds"], p["graded"]) for p in mine])
        records.append(record)
    notes: dict[str, Any] = {k: int(gaps[k]) for k in gaps.keys()}
    notes["states_scorer"] = None if chosen["name"] is None else \
        chosen["name"] + ("" if chosen["version"] is None else f"@{chosen['version']}")
    notes["interval_method"] = intervals.METHOD
    notes["adjudicated_issues"] = int(overridden)  # grades a person's verdict replaced
    notes["differences"] = differences(points)
    notes["imported_runs"] = sum(imported.values())
    notes["imported_excluded"] = int(exclude_imported)
    notes.update({f"imported_by_{signer}": n for signer, n in imported.items()})
    return records, notes


def _by_group(points: list[Any]) -> dict[tuple[str, str, str, int], list[Any]]:
    grouped: dict[tuple[str, str, str, int], list[Any]] = {}
    for p in points:
        grouped.setdefault((p["model"], p["definition"], p["scorer_name"],
                            p["scorer_version"]), []).append(p)
    return grouped


def differences(points: list[Any]) -> list[dict[str, Any]]:
    """For each scorer, each pair of (model, definition) rows: B's recall minus A's on the
    examples both ran, and whether a paired bootstrap over those examples says it differs."""
    grouped = _by_group(points)
    out = []
    keys = sorted(grouped)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[2:] != b[2:]:
                continue
            mine = {(p["snapshot"], p["files_hash"]): p for p in grouped[a]}
            theirs = {(p["snapshot"], p["files_hash"]): p for p in grouped[b]}
            shared = sorted(set(mine) & set(theirs))
            diff = intervals.paired_difference(
                [((mine[e]["recalled"], mine[e]["expected"]),
                  (theirs[e]["recalled"], theirs[e]["expected"])) for e in shared])
            out.append({"scorer": f"{a[2]}@{a[3]}", "a": {"model": a[0], "definition": a[1]},
                        "b": {"model": b[0], "definition": b[1]}, "examples": diff.examples,
                        "recall_delta": diff.delta, "low": diff.low, "high": diff.high,
                        "significant": diff.significant})
    return out


async def report_cmd(args: argparse.Namespace) -> int:
    name, version = scorer_filter(args.scorer)
    async with EventStore.open(max_connections=2) as store:
        if args.as_of is None:
            records, notes = await load(store, name, version, args.exclude_imported,
                                        args.adjudicated)
        else:
            with progress.counting_events(f"folding the log up to {args.as_of}") as advance:
                records, notes = await load(store, name, version, args.exclude_imported,
                                            args.adjudicated, args.as_of, advance)
    if args.format == "json":
        print(orjson.dumps({"scores": records, "evidence": notes}).decode())
    elif args.format == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(records)
        print(out.getvalue(), end="")
    else:
        print_table(records, notes, wide=args.wide)
    return 0


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


# The table's columns: (header, cell, shown at any width). At less than WIDE_AT columns
# (an 80-column terminal, a pipe) the others are left out, as gh does, rather than every cell
# cut to `refer…`; `--wide` shows them all.
WIDE_AT = 150
_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str], bool]] = [
    ("model", lambda r: str(r["model"]), True),
    ("definition", lambda r: str(r["definition"]), True),
    ("scorer", lambda r: str(r["scorer"]), True),
    ("runs (examples)", lambda r: f"{r['runs']} ({r['examples']})", True),
    ("recall [95% CI]", lambda r: f"{_pct(r['recall'])} [{_pct(r['recall_low'])}, "
                                  f"{_pct(r['recall_high'])}]", True),
    ("graded recall", lambda r: _pct(r["recall_graded"]), False),
    ("precision [95% CI]", lambda r: f"{_pct(r['precision'])} [{_pct(r['precision_low'])}, "
                                     f"{_pct(r['precision_high'])}]", True),
    ("partial", lambda r: str(int(r["partial"] or 0)), False),
    ("known FP", lambda r: str(int(r["known_fp"] or 0)), False),
    ("unmatched", lambda r: str(int(r["unmatched"] or 0)), False),
    ("run recall mean ± sd", lambda r: f"{_pct(r['mean_run_recall'])} ± "
                                       f"{_pct(r['stddev_run_recall'])}", False),
]


def print_table(records: list[dict[str, Any]], notes: dict[str, Any],
                wide: bool = False) -> None:
    console = Console()
    every = wide or console.width >= WIDE_AT
    shown = [(header, cell) for header, cell, always in _COLUMNS if every or always]
    table = Table(*(header for header, _cell in shown))
    for r in records:
        table.add_row(*(cell(r) for _header, cell in shown))
    console.print(table)
    if left := [header for header, _cell, always in _COLUMNS if not (every or always)]:
        console.print(Text(f"not shown at {console.width} columns: {', '.join(left)} "
                           f"(--wide, --format csv or json)"))
    console.print(Text(f"intervals: {notes['interval_method']}"))
    console.print(Text(
        f"as of log point {notes['as_of']} (`props report --as-of {notes['as_of']}` gives "
        "this report again)" if notes["as_of"] else
        "the projections stand at different points of the log: run `props projections "
        "run` (or rebuild) before quoting these figures"))
    under = notes["states_scorer"] or "no scorer (none is active)"
    console.print(Text(
        f"critic runs: {notes['critic_runs']}, each in one state under {under}: scored: "
        f"{notes['scored']}; excluded (run.excluded): {notes['excluded']}; without a finish "
        f"event (missing evidence): "
        f"{notes['unfinished']}; finished but not completed: {notes['not_completed']}; "
        f"completed with no issue reported (in the figures, found nothing): "
        f"{notes['no_issues']}; with "
        f"issues {under} has not graded: {notes['ungraded']}; graded against ground truth "
        f"that is not recorded (unscorable): {notes['unscorable']}"))
    if notes["adjudicated_issues"]:
        console.print(Text(f"adjudicated: {notes['adjudicated_issues']} grade(s) replaced by "
                           f"a person's verdict (props review)"))
    if notes["imported_runs"]:
        signers = ", ".join(f"{k.removeprefix('imported_by_')}: {v}" for k, v in notes.items()
                            if k.startswith("imported_by_"))
        console.print(
            f"scored runs from imported export files: {notes['imported_runs']} ({signers}); "
            + ("left out of the figures above" if notes["imported_excluded"] else
               "included above (--exclude-imported leaves them out)"))

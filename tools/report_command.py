"""`props report`: recall and precision per model, definition and scorer, from projections.

It says how many runs lack evidence (never finished) or could not be scored, instead of
quietly leaving them out of the figures.
"""

from __future__ import annotations

import argparse
import csv
import io
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from props.core import errors
from props.core.store import EventStore
from props.schema import queries

_Q = queries.load("report")
COLUMNS = ["model", "definition", "scorer", "runs", "recall", "recall_low", "recall_high",
           "precision", "precision_low", "precision_high", "known_fp", "unmatched",
           "mean_run_recall", "stddev_run_recall"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="recall and precision per model, definition and scorer",
        description="Recall (TP occurrences found over those in scope) and precision (issues "
        "matching a TP over graded issues) per model, critic definition and scorer, with "
        "Wilson 95%% intervals, from the projections (run `props projections run` or "
        "`rebuild` first). Runs without a finish event and finished runs nobody graded are "
        "counted and reported, never silently left out, and so are runs that came in from "
        "imported export files (by the key that signed them, or 'unsigned').",
    )
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.add_argument("--scorer", help="only this scorer, NAME or NAME@VERSION")
    p.add_argument("--exclude-imported", action="store_true",
                   help="leave out the runs that came in from imported export files")
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
               exclude_imported: bool = False
               ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The score rows and the counts of what they leave out (`imported_runs`: scored runs
    from imported files, `imported_by_<signer>` each signer's share; left out of the rows
    with `exclude_imported`)."""
    exists = await store.pool.fetchval("SELECT to_regclass('projections.model_scores')")
    if exists is None:
        raise errors.SchemaError("the projections are not built yet: run "
                                 "`props projections rebuild --all` (or `run`)")
    async with store.pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT set_config('props.exclude_imported', $1, true)",
                           "on" if exclude_imported else "off")
        rows = await conn.fetch(_Q["model_scores"], name, version)
    gaps = await store.pool.fetchrow(_Q["evidence_gaps"])
    assert gaps is not None
    imported = {r["signer"]: int(r["runs"])
                for r in await store.pool.fetch(_Q["imported_runs"], name, version)}
    records = [{
        "model": r["model"], "definition": r["definition"],
        "scorer": f"{r['scorer_name']}@{r['scorer_version']}", "runs": r["runs"],
        **{k: (None if r[k] is None else float(r[k])) for k in COLUMNS[4:]},
    } for r in rows]
    notes = {k: int(gaps[k]) for k in gaps.keys()}
    notes["imported_runs"] = sum(imported.values())
    notes["imported_excluded"] = int(exclude_imported)
    notes.update({f"imported_by_{signer}": n for signer, n in imported.items()})
    return records, notes


async def report_cmd(args: argparse.Namespace) -> int:
    name, version = scorer_filter(args.scorer)
    async with EventStore.open(max_connections=2) as store:
        records, notes = await load(store, name, version, args.exclude_imported)
    if args.format == "json":
        print(orjson.dumps({"scores": records, "evidence": notes}).decode())
    elif args.format == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(records)
        print(out.getvalue(), end="")
    else:
        print_table(records, notes)
    return 0


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def print_table(records: list[dict[str, Any]], notes: dict[str, int]) -> None:
    console = Console(highlight=False)
    table = Table("model", "definition", "scorer", "runs", "recall [95% CI]",
                  "precision [95% CI]", "known FP", "unmatched", "run recall mean ± sd")
    for r in records:
        sd = r["stddev_run_recall"]
        table.add_row(
            r["model"], r["definition"], r["scorer"], str(r["runs"]),
            f"{_pct(r['recall'])} [{_pct(r['recall_low'])}, {_pct(r['recall_high'])}]",
            f"{_pct(r['precision'])} [{_pct(r['precision_low'])}, "
            f"{_pct(r['precision_high'])}]",
            str(int(r["known_fp"] or 0)), str(int(r["unmatched"] or 0)),
            f"{_pct(r['mean_run_recall'])} ± {_pct(sd)}",
        )
    console.print(table)
    console.print(
        f"critic runs: {notes['critic_runs']}; without a finish event (missing evidence): "
        f"{notes['unfinished']}; finished but not completed: {notes['not_completed']}; "
        f"completed with issues not graded by the active scorer: {notes['ungraded']}; "
        f"graded against ground truth that is not recorded (unscorable): "
        f"{notes['unscorable']}"
    )
    if notes["imported_runs"]:
        signers = ", ".join(f"{k.removeprefix('imported_by_')}: {v}" for k, v in notes.items()
                            if k.startswith("imported_by_"))
        console.print(
            f"scored runs from imported export files: {notes['imported_runs']} ({signers}); "
            + ("left out of the figures above" if notes["imported_excluded"] else
               "included above (--exclude-imported leaves them out)"))

"""What `props report` does: the handlers that the parsers of
`props.tools.command_line.commands.report` name."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable

import orjson

from props.core.log.store import EventStore
from props.projections.figures import COLUMNS, Scope, load, scorer_filter
from props.tools.command_line import figure_tables, progress, render


async def report_cmd(args: argparse.Namespace, store: EventStore) -> int:
    name, version = scorer_filter(args.scorer)
    # A bar only while --as-of folds the log again; the live report reads at once.
    folding: contextlib.AbstractContextManager[Callable[[int], None] | None] = \
        progress.counting_events(f"folding the log up to {args.as_of}") if args.as_of \
        else contextlib.nullcontext()
    with folding as advance:
        records, notes = await load(store, name, version, args.exclude_imported,
                                    args.adjudicated, args.as_of, advance, Scope(
                                        args.model, args.definition, args.snapshot,
                                        args.evaluation))
    if args.format == "json":
        print(orjson.dumps({"scores": records, "evidence": notes}).decode())
    elif args.format == "csv":
        render.print_csv(COLUMNS, ([r.get(c) for c in COLUMNS] for r in records))
    else:
        figure_tables.print_report(records, notes, wide=args.wide)
    return 0

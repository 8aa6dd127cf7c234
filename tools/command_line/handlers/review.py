"""What `props review` does: the handlers that the parsers of
`props.tools.command_line.commands.review` name. The verdicts themselves are checked and written by
`props.core.scoring.reviews`, which the viewer's review page uses too."""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from rich.text import Text

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import reviews
from props.projections import status as projection_status
from props.tools.command_line import arguments
from props.tools.command_line.render import Console

console = Console(highlight=False)


async def next_cmd(args: argparse.Namespace, store: EventStore) -> int:
    name, version = await reviews.scorer_or_active(store, args.scorer)
    found = await reviews.pending(store, name, version)
    if args.format == "json":  # the grade waiting (null: none), and where its match lies
        print(orjson.dumps(None if not found else {
            "scorer": found[0].scorer, "match": str(found[0].match),
            "grade": found[0].grade, "truth": found[0].matched_truth}, default=str).decode())
        return 0
    if not found:
        console.print(f"nothing to review: every grade under {name}@{version} has a verdict")
        return 0
    [item] = found
    row = item.grade
    matched = f"{item.match} (grade {row['grade']})" if row["tp_id"] else str(item.match)
    console.print(Text(f"run {row['run_id']} issue {row['issue_id']} "
                       f"(snapshot {row['snapshot']}), graded by {item.scorer}: {matched}"))
    console.print(Text(f"  reported at: {where(row['locations'])}"))
    console.print(Text(f"  rationale: {row['rationale']}"))
    truth = item.matched_truth
    if truth is not None:
        console.print(Text(f"  {item.match} lies at: {where(truth['locations'])}"))
    console.print(Text(f"  then: props review confirm {row['run_id']} {row['issue_id']}, or "
                       f"props review correct {row['run_id']} {row['issue_id']} "
                       f"--tp ID[#N] | --fp ID | --none"))
    return 0


def where(locations: list[Any]) -> str:
    """`file:start-end,...; ...` of locations."""
    return "; ".join(f"{loc['file']}:" + ",".join(f"{r['start']}-{r['end']}"
                                                  for r in loc["ranges"]) for loc in locations)


async def _folded(store: EventStore) -> None:
    """A verdict reaches every figure at once: the projections fold it now (a runner here, or
    the service's), and say so when they could not catch up."""
    if behind := await projection_status.folded(store):
        console.print(Text(f"the projections are {behind} event(s) behind the log: the "
                           f"figures show this verdict once they catch up (props projections "
                           f"run)"))


async def confirm_cmd(args: argparse.Namespace, store: EventStore) -> int:
    args.run_id = await arguments.resolve_run(store, args.run_id)
    name, version = await reviews.scorer_or_active(store, args.scorer)
    await reviews.confirm(store, args.run_id, args.issue_id, name, version,
                          args.reviewer, args.note)
    console.print(Text(f"confirmed {name}@{version}'s grade of {args.issue_id} "
                       f"(as {args.reviewer})"))
    await _folded(store)
    return 0


async def correct_cmd(args: argparse.Namespace, store: EventStore) -> int:
    match = reviews.Match.parse_tp(args.tp) if args.tp else reviews.Match(fp_id=args.fp)
    args.run_id = await arguments.resolve_run(store, args.run_id)
    await reviews.correct(store, args.run_id, args.issue_id, match, args.reviewer,
                          args.note)
    console.print(Text(f"recorded: {args.issue_id} of run {args.run_id} is {match} "
                       f"(as {args.reviewer})"))
    await _folded(store)
    return 0


async def exclude_cmd(args: argparse.Namespace, store: EventStore) -> int:
    args.run_id = await arguments.resolve_run(store, args.run_id)
    if not await store.read_stream(streams.run(args.run_id)):
        raise errors.NotFound(f"no run {args.run_id}")
    await store.append(streams.run(args.run_id), [catalog.RunExcluded(
        run_id=args.run_id, reason=args.reason, excluded_by=args.by)])
    console.print(Text(f"run {args.run_id} excluded from every score: {args.reason}"))
    await _folded(store)
    return 0

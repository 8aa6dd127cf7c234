"""What `props review` does: the handlers that the parsers of
`props.tools.commands.review` name."""

from __future__ import annotations

import argparse
import uuid

import orjson
from rich.text import Text

from props.core.domain import catalog, streams
from props.core.domain.store import open_store
from props.core.log import errors
from props.core.log.events import NewEvent
from props.core.log.store import EventStore
from props.core.scoring import registration, scorers
from props.schema import queries
from props.tools import arguments
from props.tools.render import Console

console = Console(highlight=False)


_Q = queries.load("reviews")


_NAMESPACE = uuid.UUID("2c8f7a51-93d4-4e6b-a0f2-5b1d7e9c3a64")


async def _scorer(store: EventStore, ref: str | None) -> tuple[str, int]:
    if ref is not None:
        return await registration.resolve_ref(store, ref)
    row = await store.sql.fetchrow("SELECT name, version FROM projections.active_scorer")
    if row is None:
        raise errors.UnknownScorer("no scorer is active: name one with --scorer")
    return str(row["name"]), int(row["version"])


async def next_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=2) as store:
        name, version = await _scorer(store, args.scorer)
        row = await store.sql.fetchrow(_Q["next_unreviewed"], name, version,
                                        scorers.HUMAN_NAME)
        if row is None:
            console.print(f"nothing to review: every grade under {name}@{version} has a verdict")
            return 0
        truth = {(t["kind"], t["id"], t["occurrence"]): t for t in await store.sql.fetch(
            _Q["truth_ids"], row["snapshot"], row["ground_truth_hash"])}
    matched = (f"TP {row['tp_id']}#{row['tp_occurrence']} (grade {row['grade']})"
               if row["tp_id"] else f"decoy {row['fp_id']}" if row["fp_id"] else "nothing")
    console.print(Text(f"run {row['run_id']} issue {row['issue_id']} "
                       f"(snapshot {row['snapshot']}), graded by {name}@{version}: {matched}"))
    console.print(Text(f"  reported at: {_where(row['locations'])}"))
    console.print(Text(f"  rationale: {row['rationale']}"))
    key = ("tp", row["tp_id"], row["tp_occurrence"]) if row["tp_id"] else \
        ("fp", row["fp_id"], None)
    if key in truth:
        console.print(Text(f"  {matched.split(' (')[0]} lies at: "
                           f"{_where(truth[key]['locations'])}"))
    console.print(Text(f"  then: props review confirm {row['run_id']} {row['issue_id']}, or "
                       f"props review correct {row['run_id']} {row['issue_id']} "
                       f"--tp ID[#N] | --fp ID | --none"))
    return 0


def _where(locations_json: str) -> str:
    found = orjson.loads(locations_json)
    if found and isinstance(found[0], list):  # a decoy: its occurrences
        found = [loc for occurrence in found for loc in occurrence]
    return "; ".join(f"{loc['file']}:" + ",".join(f"{r['start']}-{r['end']}"
                                                  for r in loc["ranges"]) for loc in found)


async def _append_verdict(store: EventStore, verdict: catalog.GradeReviewed) -> None:
    registered = scorers.human_registration()
    await store.append(streams.scorer(scorers.HUMAN_NAME), [NewEvent(
        registered, uuid.uuid5(_NAMESPACE, f"register:{scorers.HUMAN}"))])
    await store.append(streams.review(verdict.critique_run_id), [NewEvent(
        verdict, uuid.uuid4(), {"actor": f"reviewer:{verdict.reviewer}"})])


async def confirm_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=2) as store:
        args.run_id = await arguments.resolve_run(store, args.run_id)
        name, version = await _scorer(store, args.scorer)
        grade = await store.sql.fetchrow(_Q["grade_of"], args.run_id, args.issue_id, name,
                                          version)
        if grade is None:
            raise errors.NotFound(f"no grade of run {args.run_id} issue {args.issue_id!r} "
                                  f"under {name}@{version}")
        await _append_verdict(store, catalog.GradeReviewed(
            critique_run_id=args.run_id, critique_issue_id=args.issue_id,
            tp_id=grade["tp_id"] if grade["grade"] >= scorers.FIND_GRADE else None,
            tp_occurrence=grade["tp_occurrence"] if grade["grade"] >= scorers.FIND_GRADE
            else None, fp_id=grade["fp_id"], ground_truth_hash=grade["ground_truth_hash"],
            confirms=catalog.ScorerRef(name=name, version=version,
                                       code_hash=grade["code_hash"],
                                       ground_truth_hash=grade["ground_truth_hash"]),
            reviewer=args.reviewer, note=args.note))
    console.print(Text(f"confirmed {name}@{version}'s grade of {args.issue_id} "
                       f"(as {args.reviewer})"))
    return 0


async def correct_cmd(args: argparse.Namespace) -> int:
    tp_id, occurrence, fp_id = None, None, None
    if args.tp:
        tp_id, _, number = args.tp.partition("#")
        if number and not number.isdigit():
            raise errors.InvalidEvent(f"--tp {args.tp!r} is ID or ID#N")
        occurrence = int(number or 1)
    elif args.fp:
        fp_id = args.fp
    async with open_store(max_connections=2) as store:
        args.run_id = await arguments.resolve_run(store, args.run_id)
        found = await store.sql.fetchrow(_Q["issue_and_truth"], args.run_id, args.issue_id)
        if found is None or found["ground_truth_hash"] is None:
            raise errors.NotFound(f"no issue {args.issue_id!r} in run {args.run_id} (or its "
                                  f"snapshot is not recorded)")
        truth = {(t["kind"], t["id"], t["occurrence"]) for t in await store.sql.fetch(
            _Q["truth_ids"], found["snapshot"], found["ground_truth_hash"])}
        if tp_id is not None and ("tp", tp_id, occurrence) not in truth:
            raise errors.InvalidEvent(f"{found['snapshot']} has no TP occurrence "
                                      f"{tp_id}#{occurrence}; nothing was written")
        if fp_id is not None and ("fp", fp_id, None) not in truth:
            raise errors.InvalidEvent(f"{found['snapshot']} has no decoy {fp_id}; nothing "
                                      f"was written")
        await _append_verdict(store, catalog.GradeReviewed(
            critique_run_id=args.run_id, critique_issue_id=args.issue_id, tp_id=tp_id,
            tp_occurrence=occurrence, fp_id=fp_id,
            ground_truth_hash=found["ground_truth_hash"], reviewer=args.reviewer,
            note=args.note))
    said = f"TP {tp_id}#{occurrence}" if tp_id else f"decoy {fp_id}" if fp_id else "nothing"
    console.print(Text(f"recorded: {args.issue_id} of run {args.run_id} is {said} "
                       f"(as {args.reviewer})"))
    return 0


async def exclude_cmd(args: argparse.Namespace) -> int:
    async with open_store(max_connections=2) as store:
        args.run_id = await arguments.resolve_run(store, args.run_id)
        if not await store.read_stream(streams.run(args.run_id)):
            raise errors.NotFound(f"no run {args.run_id}")
        await store.append(streams.run(args.run_id), [catalog.RunExcluded(
            run_id=args.run_id, reason=args.reason, excluded_by=args.by)])
    console.print(Text(f"run {args.run_id} excluded from every score: {args.reason}"))
    return 0

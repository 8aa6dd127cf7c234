"""What `props scoring` does: the handlers that the parsers of
`props.tools.command_line.commands.scoring` name."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from props.core.domain import catalog, streams
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import (
    cohorts,
    comparison,
    gate,
    identity,
    llm_judge,
    registration,
    rescoring,
    scorers,
    verification,
)
from props.projections import status as projection_status
from props.tools.bundled import samples
from props.tools.command_line import (
    arguments,
    figure_tables,
    progress,
    render,
    verify_tables,
)
from props.tools.command_line.render import Console

console = Console(highlight=False)


async def _selection(args: argparse.Namespace, store: EventStore) -> rescoring.Selection:
    """The runs the selectors name (a `--run` prefix becomes its whole id, as in `runs`)."""
    return rescoring.Selection(await arguments.resolve_runs(store, args.run), args.since,
                               args.until, args.model, args.definition, args.snapshot, args.all)


async def list_cmd(args: argparse.Namespace, store: EventStore) -> int:
    registered: dict[str, str] = {}
    for rec in await store.reader.read_category_now("scorer"):
        if isinstance(rec.event, catalog.ScorerRegistered):
            registered[f"{rec.event.name}@{rec.event.version}"] = rec.event.code_hash
    active = await registration.active_scorer(store)  # (an imported activation is history)
    known: dict[str, scorers.Scorer] = {**scorers.SCORERS, **llm_judge.configured()}
    rows = []
    for ref, s in known.items():
        state = ("active" if ref == active else "registered") if ref in registered else None
        if ref in registered and registered[ref] != s.code_hash:
            state = "registered with another code hash"
        rows.append({"scorer": ref, "settings": s.settings, "code_hash": s.code_hash,
                     "identity": identity.identity(s), "in_the_log": state})
    render.emit(args, rows, [("scorer", "scorer"), ("settings", "settings"),
                             ("code_hash", "code hash"), ("identity", "identity"),
                             ("in_the_log", "in the log")],
                empty="no scorers", cells={
                    "settings": lambda v: ", ".join(
                        f"{k}={orjson.dumps(val).decode()}" for k, val in v.items()) or "-",
                    "code_hash": lambda h: h[:16], "identity": identity.short})
    return 0


async def register_cmd(args: argparse.Namespace, store: EventStore) -> int:
    s = scorers.scorer(args.scorer)
    added = await registration.ensure_registered(store, s)
    console.print(f"{args.scorer} {'registered' if added else 'was already registered'} "
                  f"(code hash {s.code_hash[:16]})")
    return 0


async def activate_cmd(args: argparse.Namespace, store: EventStore) -> int:
    if args.force != (args.reason is not None):
        raise errors.ValueRefused("--force and --reason TEXT go together: say why, it is "
                                  "recorded")
    reason = args.reason if args.force else None
    if args.scorer in scorers.SCORERS or args.scorer in llm_judge.configured():
        s = scorers.scorer(args.scorer)
        changed, where = await gate.activate(store, s, force_reason=reason)
        forced = where.refusal is not None and changed
        how = "" if not changed else " (forced: recorded with the reason)" if forced else \
            f" (verified on {where.verified.cohort.kind} {where.verified.cohort.name}, " \
            f"identity {identity.short(where.identity_hash)})" if where.verified else ""
    else:  # a grader image's scorer: registered when the grader was pushed, not replayable
        name, version = await registration.resolve_ref(store, args.scorer)
        changed = await _activate_image(store, name, version, reason)
        how = " (forced: recorded with the reason)" if changed else ""
    console.print(f"{args.scorer} is now the active scorer{how}" if changed
                  else f"{args.scorer} was already the active scorer")
    return 0


async def _activate_image(store: EventStore, name: str, version: int,
                          reason: str | None) -> bool:
    """A grader image runs in a container, which `props scorers verify` cannot replay yet:
    it is activated only with --force, recorded."""
    if await registration.active_scorer(store) == f"{name}@{version}":
        return False
    if reason is None:
        raise gate.ActivationRefused(
            f"refused: {name}@{version} is a grader image, which `props scorers verify` "
            f"cannot replay; activate it with --force --reason TEXT (recorded)")
    code_hash = next(r.event.code_hash for r in await store.read_stream(streams.scorer(name))
                     if isinstance(r.event, catalog.ScorerRegistered)
                     and r.event.version == version)
    return await registration.activate(store, name, version, catalog.ScorerForced(
        name=name, version=version, identity_hash=code_hash, reason=reason,
        actor=gate.actor(), refused="a grader image cannot be verified"))


async def verify_cmd(args: argparse.Namespace, store: EventStore) -> int:
    candidate = scorers.scorer(args.candidate)
    against = scorers.scorer(args.against or await registration.active_scorer(store)
                             or scorers.DEFAULT_SCORER)
    cohort = await (cohorts.of_evaluation(store, args.cohort) if args.cohort
                    else cohorts.as_of(store, args.as_of) if args.as_of is not None
                    else cohorts.default(store))
    labels = verification.Labels.load(args.labels or samples.cases_dir())
    label = f"verifying {args.candidate} on {cohort.label}"
    with progress.counting_events(label, cohort.spec.runs + len(labels.cases),
                                  unit="runs and cases") as advance:
        v = await verification.verify(store, candidate, against, cohort, labels,
                                      progress=advance)
    if args.format == "json":
        sys.stdout.buffer.write(orjson.dumps(verification.outcomes_json(v)) + b"\n")
    else:
        verify_tables.print_verification(v, gate.policy())
    return 0 if v.event.status == "completed" else 3


async def rescore_cmd(args: argparse.Namespace, store: EventStore) -> int:
    s = scorers.scorer(args.scorer)
    selection = await _selection(args, store)
    columns = (TextColumn(f"rescoring with {args.scorer}", markup=False), BarColumn(),
               MofNCompleteColumn(), TaskProgressColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("rescore", total=None)
        report = await rescoring.rescore(
            store, s, selection, ground_truth=args.ground_truth, dry_run=args.dry_run,
            progress=lambda n: bar.advance(task, n),
            selected=lambda n: bar.update(task, total=n))
    verb = "would append" if args.dry_run else "appended"
    console.print(
        f"{report.selected} run(s) selected; {report.graded_runs} graded with {report.scorer} "
        f"against the ground truth {args.ground_truth}; {report.grades} grade(s), "
        f"{verb} {report.appended if not args.dry_run else report.grades}")
    for reason, count in sorted(report.unscorable.items()):
        console.print(f"unscorable: {count} run(s): {reason}")
    if report.unscorable_issues:
        console.print(f"unscorable: {report.unscorable_issues} issue(s) the judge could not "
                      f"grade (each with why, in grades.unscorable); their runs are not "
                      f"scored by {report.scorer}")
    for problem in report.scorer_errors[:10]:
        console.print(f"scorer error: {problem}")
    if not report.accounted:
        raise errors.PropsError("some runs are neither graded nor unscorable: a bug")
    if report.appended and not args.dry_run and (behind := await projection_status.folded(
            store)):
        console.print(f"the projections are {behind} event(s) behind the log: `props "
                      f"compare` and `props report` read them (`props projections run`)")
    if report.scorer_errors:
        raise errors.PropsError(
            f"{len(report.scorer_errors)} run(s) could not be graded by {report.scorer}: "
            f"run the same command again to grade them (graded runs are not asked again)")
    return 0


async def compare_cmd(args: argparse.Namespace, store: EventStore) -> int:
    c = await comparison.compare(store, args.a, args.b, await _selection(args, store))
    if args.format == "json":
        sys.stdout.buffer.write(comparison.comparison_json(c) + b"\n")
    elif args.format == "csv":
        rows: list[list[Any]] = [[run_id, "unchanged", "", "", "", "", "", "", ""]
                                 for run_id in c.unchanged]
        rows += [[d.run_id, "changed", "", d.recall_a, d.recall_b, d.precision_a,
                  d.precision_b, " ".join(d.changed_issues), "; ".join(d.what)]
                 for d in c.changed]
        rows += [[run_id, "unscorable", reason, "", "", "", "", "", ""]
                 for run_id, reason in c.unscorable.items()]
        render.print_csv(["run_id", "bucket", "reason", "recall_a", "recall_b", "precision_a",
                          "precision_b", "changed_issues", "what_changed"], rows)
    else:
        figure_tables.print_comparison(c, wide=args.wide)
    return 0 if c.complete else 1

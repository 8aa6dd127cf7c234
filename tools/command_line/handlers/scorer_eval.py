"""What `props scorer_eval` does: the handlers that the parsers of
`props.tools.command_line.commands.scorer_eval` name."""

from __future__ import annotations

import argparse

import orjson
from rich.text import Text

from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import (
    evaluation,
    llm_judge,
    located,
    registration,
    rescoring,
    scorers,
)
from props.tools.bundled import samples
from props.tools.command_line import arguments
from props.tools.command_line.render import Column, Console, print_table

console = Console()
# The confusion table's short headers at 80 columns (named under the table).
_SHORT = {"right_tp": "TP ok", "wrong_tp": "TP bad", "tp_missed": "TP miss",
          "false_find": "FF", "decoy_right": "D ok", "decoy_wrong": "D bad",
          "right_none": "N ok", "unscorable": "unsc."}


async def eval_cmd(args: argparse.Namespace) -> int:
    if args.draws < 1:
        raise errors.ConfigurationError("--draws takes a whole number from 1")
    if args.min_accuracy is not None and not 0 <= args.min_accuracy <= 1:
        raise errors.ConfigurationError("--min-accuracy takes a number from 0 to 1")
    cases = evaluation.load(args.cases or samples.cases_dir())
    refs = args.scorer or list(scorers.SCORERS)
    chosen = [scorers.scorer(ref) for ref in refs]
    if any(llm_judge.names_an_endpoint(s) for s in chosen):
        from props.core.domain.store import open_store  # a judge's endpoint is registered

        async with open_store() as store:
            await llm_judge.know_endpoints(store)
    results = [await evaluation.evaluate(s, cases, args.draws) for s in chosen]
    below = [r.scorer for r in results
             if args.min_accuracy is not None and r.accuracy < args.min_accuracy]
    if args.format == "table":
        _print(results, cases, args.wide)
    else:
        print(orjson.dumps({"cases": len(cases), "issues": results[0].issues if results else 0,
                            "needs_judge": evaluation.needs_judge(cases),
                            "scorers": [r.summary() for r in results],
                            "below_min_accuracy": below}).decode())
    return 1 if below else 0


def _print(results: list[evaluation.Result], cases: list[evaluation.Case], wide: bool) -> None:
    print_table(console, [
        Column("scorer", "scorer"), Column("accuracy", "accuracy", justify="right"),
        *(Column(c, c.replace("_", " "), short=_SHORT[c], justify="right")
          for c in evaluation.CELLS)],
        [{"scorer": r.scorer, "accuracy": f"{100 * r.accuracy:.1f}%",
          **{c: r.cells[c] for c in evaluation.CELLS}}
         for r in results], wide=wide)
    judge = evaluation.needs_judge(cases)
    console.print(Text(f"{len(cases)} cases, {results[0].issues if results else 0} issues; "
                       f"{len(judge)} only a judge can decide: {', '.join(judge) or 'none'}"))
    for r in results:
        if r.agreement is not None:
            console.print(Text(f"{r.scorer}: draws agreed on {100 * r.agreement:.1f}% of "
                               f"issues"))
        elif not r.deterministic:
            console.print(Text(f"{r.scorer}: agreement across draws n/a (one draw; "
                               f"--draws 2 or more measures it)"))
        for line in r.wrong_decidable:
            console.print(Text(f"{r.scorer} wrong where location decides: {line}"))


async def located_cmd(args: argparse.Namespace, store: EventStore) -> int:
    if args.draws < 1 or not 1 <= args.limit_runs <= 10_000:
        raise errors.ConfigurationError("--draws takes a whole number from 1, --limit-runs "
                                        "one from 1 to 10000")
    runs = await arguments.resolve_runs(store, args.run)  # (the inputs first, as `rescore`)
    rule = await registration.resolve_ref(store, args.rule)
    judges = [scorers.scorer(ref) for ref in args.scorer]
    if ruled := [scorers.ref(j) for j in judges if j.deterministic]:
        raise errors.ConfigurationError(f"{', '.join(ruled)}: a location rule does not read "
                                        "claims; name a judge of the scorers file")
    found = await located.candidates(store, rule, rescoring.Selection(
        runs, args.since, args.until, args.model, args.definition, args.snapshot, args.all),
        args.limit_runs)
    results = [(await evaluation.evaluate(j, found.located, args.draws),
                await evaluation.evaluate(j, found.reviewed, args.draws)
                if found.reviewed else None) for j in judges]
    if args.format == "json":
        print(orjson.dumps({
            "rule": args.rule, "runs": found.runs,
            "candidates": sum(len(c.issues) for c in found.located),
            "reviewed": sum(len(c.issues) for c in found.reviewed),
            "judges": [{"confirms": conf.summary(),
                        "with_people": None if people is None else people.summary()}
                       for conf, people in results]}).decode())
        return 0
    for conf, people in results:
        confirmed = conf.cells["right_tp"]
        console.print(Text(
            f"{conf.scorer} on {conf.issues} candidate(s) {args.rule} located in "
            f"{found.runs} run(s): confirms {confirmed} ({_share(confirmed, conf.issues)}), "
            f"names another defect for {conf.cells['wrong_tp']}, nothing or a decoy for "
            f"{conf.cells['tp_missed']}, cannot grade {conf.cells['unscorable']}"))
        console.print(Text(
            "  agreement with people: no candidate has a person's verdict (props review)"
            if people is None else
            f"  agreement with people on {people.issues} reviewed candidate(s): "
            f"{_share(round(people.accuracy * people.issues), people.issues)}"))
        if conf.agreement is not None and args.draws > 1:
            console.print(Text(f"  draws agreed on {100 * conf.agreement:.1f}% of candidates"))
    return 0


def _share(n: int, of: int) -> str:
    return f"{100 * n / of:.1f}%" if of else "-"

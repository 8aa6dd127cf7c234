"""What `props scorers verify` prints for people: the buckets, the figures' change per
critic, the agreements, the cost, where the policy stands, and each diverged issue with its
reason (`--format json` gives every issue's bucket)."""

from __future__ import annotations

from rich.text import Text

from props.core.scoring import gate, identity, verification
from props.tools.command_line import render
from props.tools.command_line.render import Column, Console

DIVERGED_SHOWN = 20


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _interval(low: float | None, high: float | None) -> str:
    return "" if low is None or high is None else f" [{low:+.1%}, {high:+.1%}]"


def print_verification(v: verification.Verification, rules: gate.Policy) -> None:
    e = v.event
    out = Console(highlight=False)
    out.print(Text(
        f"{e.name}@{e.version} (identity {identity.short(e.identity_hash)}) beside "
        f"{e.against} on {e.cohort.kind} {e.cohort.name} ({e.cohort.runs} runs, cohort "
        f"{e.cohort.cohort_id}): {e.status}; {e.replayed_runs} run(s) replayed"))
    diverged = ", ".join(f"{d.reason} {d.issues}" for d in e.diverged)
    out.print(Text(
        f"{e.candidates} issue(s) = unchanged {e.unchanged} + newly credited "
        f"{e.newly_credited} + newly uncredited {e.newly_uncredited} + credited elsewhere "
        f"{e.credited_elsewhere} + diverged {sum(d.issues for d in e.diverged)}"
        + (f" ({diverged})" if diverged else "")))
    if e.critics:
        rows = [{"critic": f"{c.model} / {c.definition}", "runs": c.runs,
                 "before": _share(c.recall_before), "after": _share(c.recall_after),
                 "change": ("-" if c.delta is None else f"{c.delta:+.1%}")
                 + _interval(c.low, c.high)} for c in e.critics]
        render.print_table(out, [Column("critic", "critic"), Column("runs", "runs"),
                                 Column("before", "recall before"),
                                 Column("after", "recall after"),
                                 Column("change", "change [interval]")], rows)
    for what, a in (("labelled cases", e.labels), ("people's verdicts", e.people)):
        out.print(Text(f"{what}: " + ("not measured" if a is None else
                                      f"{a.agreed}/{a.issues} agree ({_share(a.share)}"
                                      + ("" if a.low is None or a.high is None else
                                         f", {_share(a.low)} to {_share(a.high)}") + ")")))
    out.print(Text(f"cost: {e.tokens_in:,} tokens in, {e.tokens_out:,} out, "
                   f"${e.cost_usd:.4f}, {e.model_ms / 1000:.1f}s of model time; "
                   f"{v.asked} run(s) asked now"))
    failures = rules.failures(e) if e.status == "completed" else [
        f"the verification is {e.status}: run it again to finish it"]
    out.print(Text("policy: " + ("passes: `props scorers activate "
                                 f"{e.name}@{e.version}` may make it active" if not failures
                                 else "refused for activation: " + "; ".join(failures))))
    shown = [o for o in v.issues if o.bucket == "diverged"][:DIVERGED_SHOWN]
    for o in shown:
        out.print(Text(f"  diverged: run {str(o.run_id)[:8]} issue {o.issue_id}: {o.reason}"
                       f" ({o.detail[:200]}); before {o.before}, after {o.after}"))

"""The first hour of a newcomer, trap by trap (issue 45): each test would have failed on the
code the newcomer met, and says so where the trap is a behaviour (a negative control beside
the fix).

1. A variant of the reference critic pushed as `--local -- python -m ...reference_critic` was
   accepted, then every run failed as untrusted_local_command.
2. `props demo` again after `props definitions baseline ruff` ran 18 new cases, and its
   comparison took every run of the database.
Also: one exit code per thing missing (66), whatever the command.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from props.core.domain import catalog, definitions, evaluations, vocabulary
from props.core.domain.store import open_store
from props.core.log.store import EventStore
from props.reactors.agents import reference_critic
from props.reactors.runtimes.docker_runtime import DockerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime, ships
from props.tools.bundled import samples
from tests.reactor_helpers import finished, request, serving, sync_samples
from tests.test_cli import CLI, props

REFERENCE = "props.reactors.agents.reference_critic"


# -- 1. a variant of the reference critic ------------------------------------------------------

def test_the_help_lists_every_check_the_reference_critic_has() -> None:
    assert vocabulary.REFERENCE_CHECKS == tuple(reference_critic.CHECKS)
    out = subprocess.run([*CLI, "definitions", "reference", "--help"], capture_output=True,
                         text=True, check=True, timeout=60)
    flat = " ".join(out.stdout.split())
    assert "--name" in flat and "--config FILE" in flat
    for check in reference_critic.CHECKS:
        assert check in flat


def test_a_reference_critic_by_another_interpreter_is_refused_at_push(
        dsn: str, tmp_path: Path) -> None:
    """The trap: accepted, then 0 of 18. Now refused, naming the command that works, and
    nothing is written."""
    assert props("db", "migrate", dsn=dsn).returncode == 0
    config = tmp_path / "lite.toml"
    config.write_text('checks = ["bare-except"]\n')
    out = props("definitions", "push", "--type", "critic", "--local", "--image", "lite",
                "--config", str(config), "--", "python", "-m", REFERENCE, dsn=dsn)
    assert out.returncode == 65, out.stderr
    assert "untrusted_local_command" in out.stderr
    assert "props definitions reference --name lite --config FILE" in out.stderr
    assert out.stderr.count("\n") == 1
    assert "lite" not in props("definitions", "list", dsn=dsn).stdout


def test_a_command_props_does_not_ship_is_pushed_with_a_warning(dsn: str) -> None:
    assert props("db", "migrate", dsn=dsn).returncode == 0
    out = props("definitions", "push", "--type", "critic", "--local", "--image", "mine",
                "--", "/bin/true", dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert "--trust-local-commands" in out.stderr and "untrusted_local_command" in out.stderr


def test_an_unknown_check_is_refused_at_push(dsn: str, tmp_path: Path) -> None:
    assert props("db", "migrate", dsn=dsn).returncode == 0
    config = tmp_path / "typo.json"
    config.write_text(json.dumps({"checks": ["bare-except", "bare-exept"]}))
    out = props("definitions", "reference", "--name", "typo", "--config", str(config), dsn=dsn)
    assert out.returncode == 65 and "'bare-exept'" in out.stderr
    assert "mutable-default" in out.stderr  # the names it does have
    assert "typo" not in props("definitions", "list", dsn=dsn).stdout


def test_a_misspelt_config_key_is_refused_at_push(dsn: str, tmp_path: Path) -> None:
    """`check` for `checks` was accepted, and the variant ran every check. Control: the
    same file spelt right is pushed."""
    assert props("db", "migrate", dsn=dsn).returncode == 0
    config = tmp_path / "typo.toml"
    config.write_text('check = ["bare-except"]\n')
    out = props("definitions", "reference", "--name", "typo", "--config", str(config), dsn=dsn)
    assert out.returncode == 65 and "unknown key(s) 'check'" in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1
    assert "typo" not in props("definitions", "list", dsn=dsn).stdout
    config.write_text('checks = ["bare-except"]\n')
    out = props("definitions", "reference", "--name", "typo", "--config", str(config), dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert "typo" in props("definitions", "list", dsn=dsn).stdout


async def test_a_variant_made_as_documented_runs_where_the_trap_failed(
        dsn: str, store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`props definitions reference --name N --config FILE` runs under the default (untrusted)
    local runtime, with only its checks. Negative control: the command the newcomer pushed,
    recorded without the CLI's check, fails every run as untrusted_local_command."""
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    config = tmp_path / "lite.toml"
    config.write_text('checks = ["open-without-with", "swallowed-exception"]\n')
    out = props("definitions", "reference", "--name", "lite", "--config", str(config), dsn=dsn)
    assert out.returncode == 0, out.stderr
    assert "critic lite:local (local)" in out.stdout
    trap = ["python", "-m", REFERENCE]
    assert not ships(trap)
    await definitions.push(store, catalog.DefinitionPushed(
        agent_type="critic", name="trap", tag="local", runtime="local", image="trap",
        command=trap, config={}, digest=definitions.local_digest(trap, {})))
    await sync_samples(store)
    lite = await request(store, "lite", ref="local", model="lite", budget=0)
    trapped = await request(store, "trap", ref="local", model="trap", budget=0)
    async with serving(store, [LocalRuntime(tmp_path / "containers")]):
        done = await finished(store, lite + trapped)
    assert done[lite[0]].status == "completed", done[lite[0]]
    failure = done[trapped[0]].failure
    assert failure is not None and failure.category == "untrusted_local_command"
    rationales = [r.event.rationale for r in await store.read_stream(f"run-{lite[0]}")
                  if isinstance(r.event, catalog.IssueReported)]
    assert rationales and all(r.startswith(("[open-without-with]", "[swallowed-exception]"))
                              for r in rationales)  # csvtool also has zip-without-strict


# -- 2. the demo again is a no-op ----------------------------------------------------------------

async def test_the_demo_plan_pins_every_critic(dsn: str, store: EventStore) -> None:
    """Negative control beside the pin: with a newer baseline pushed as `latest`, the plan
    without its `ref` resolves to other cases (the 18 new runs of the trap); pinned, it
    resolves to the demo's own."""
    plan = evaluations.load_plan(samples.plans_dir() / "demo.toml")
    assert {c.ref for c in plan.critic} == {"demo"}
    await sync_samples(store)
    pushed = [definitions.reference_local().model_copy(update={"name": n, "tag": "demo"})
              for n in ("reference", "reference-lite", "baseline-ruff")]
    for d in pushed:
        await definitions.push(store, d)
    newer = pushed[2].model_copy(update={"tag": "latest", "config": {"v": 2},
                                         "digest": "sha256:" + "2" * 64})
    await definitions.push(store, newer)
    pinned = await evaluations.resolve(store, plan)
    assert {c.digest for c in pinned if c.definition == "baseline-ruff"} == {pushed[2].digest}
    floating = plan.model_copy(update={"critic": [
        c.model_copy(update={"ref": "latest"}) for c in plan.critic]})
    moved = await evaluations.resolve(store, floating)
    assert {c.digest for c in moved if c.definition == "baseline-ruff"} == {newer.digest}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_again_after_the_next_steps_appends_nothing(dsn: str, tmp_path: Path) -> None:
    """README's next steps push the baseline again (another digest) and request a run of
    one's own; the demo again records nothing of its own and compares its 18 runs only."""
    home = {"PROPS_HOME": str(tmp_path)}
    first = props("demo", dsn=dsn, env=home, timeout=600)
    assert first.returncode == 0, first.stderr
    _one_line_per_row_at_80_columns(dsn, home)
    other = props("definitions", "push", "--type", "critic", "--local", "--image", "ruff2",
                  "--name", "baseline-ruff", "--", sys.executable, "-m",
                  "props.reactors.agents.baseline_critic", dsn=dsn)
    assert other.returncode == 0, other.stderr
    asked = props("runs", "request", "--definition", "reference@demo", "--snapshot",
                  "csvtool/2025-09-03-00", dsn=dsn)
    assert asked.returncode == 0, asked.stderr
    run_id = asked.stdout.split("requested run ")[1].split()[0]
    its_own = ("WHERE stream_id = %s OR stream_id LIKE %s", f"run-{run_id}", f"grading-{run_id}%")
    before, before_outside = _count(dsn), _count(dsn, *its_own)
    again = props("demo", dsn=dsn, env=home, timeout=600)
    assert again.returncode == 0, again.stderr
    flat = " ".join(again.stdout.split())
    assert "evaluation demo v1 (demo.toml): 18 cases" in flat and "(resumed)" in flat
    assert "18 run(s) selected = " in flat  # not the 19th run, requested outside the demo
    # The demo's reactors carry out the run requested beside it: its events are the only
    # new ones.
    assert _count(dsn) - before == _count(dsn, *its_own) - before_outside


def _one_line_per_row_at_80_columns(dsn: str, home: dict[str, str]) -> None:
    """`props report` on the demo at 80 columns: one line per critic and scorer (each figure
    and its interval in one cell that never wraps), then the legend; nothing wider."""
    rows = json.loads(props("report", "--json", dsn=dsn, env=home).stdout)["scores"]
    table = props("report", dsn=dsn, env={**home, "COLUMNS": "80"}).stdout.splitlines()
    rule = next(i for i, line in enumerate(table) if line.strip() and set(line) <= {"─", " "})
    body = table[rule + 1:rule + 1 + len(rows)]
    assert len(rows) >= 6 and [line.split()[:2] for line in body] == [
        [r["definition"], r["scorer"]] for r in rows], "\n".join(table)
    assert table[rule + 1 + len(rows)].startswith("critic: ")  # the legend, not a wrap
    assert all(len(line) <= 80 for line in table)


def _count(dsn: str, where: str = "", *args: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM props.events {where}", args).fetchone()
    assert row is not None
    return int(row[0])


# -- also: one exit code for the same thing -----------------------------------------------------

def test_a_missing_critic_or_plan_file_exits_66_everywhere(dsn: str, tmp_path: Path) -> None:
    """Negative control: a plan's missing critic was 65, `runs request`'s 66; a missing plan
    file 65. The README's table says 66 for something named that is not there."""
    assert props("db", "migrate", dsn=dsn).returncode == 0
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "p"\nexamples = ["csvtool/*"]\n[[critic]]\ndefinition = "nope"\n')
    assert props("specimens", "sync", str(samples.samples_dir()), dsn=dsn).returncode == 0
    in_plan = props("eval", "run", str(plan), dsn=dsn)
    asked = props("runs", "request", "--definition", "nope", "--snapshot",
                  "csvtool/2025-09-03-00", dsn=dsn)
    no_file = props("eval", "run", str(tmp_path / "missing.toml"), dsn=dsn)
    assert (in_plan.returncode, asked.returncode, no_file.returncode) == (66, 66, 66), \
        (in_plan.stderr, asked.stderr, no_file.stderr)
    assert "no critic definition 'nope'" in in_plan.stderr
    assert "no plan file" in no_file.stderr


# -- 4. eval run: failures once per kind, failed apart from done --------------------------------

def test_eval_run_says_each_kind_of_failure_once_and_counts_failed_apart(
        dsn: str, tmp_path: Path) -> None:
    assert props("db", "migrate", dsn=dsn).returncode == 0
    assert props("specimens", "sync", str(samples.samples_dir()), dsn=dsn).returncode == 0
    pushed = props("definitions", "push", "--type", "critic", "--local", "--image", "mine",
                   "--tag", "t", "--", "/bin/true", dsn=dsn)
    assert pushed.returncode == 0, pushed.stderr
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "mine"\nexamples = ["csvtool/*", "logparse/*"]\nepochs = 3\n'
                    'timeout_seconds = 60\n[[critic]]\ndefinition = "mine"\nref = "t"\n')
    out = props("eval", "run", str(plan), "--runtime", "local", dsn=dsn,
                env={"PROPS_HOME": str(tmp_path), "COLUMNS": "80"}, timeout=1800)
    assert out.returncode != 0
    said = out.stdout + out.stderr
    # six cases fail alike: the launcher's paragraph once, with its count
    assert said.count("could not be carried out") == 1, said
    assert "6 x warning: run … could not be carried out: The local runtime runs only" in said
    assert "mine: 0/6 done (0 scored, 0 excluded), 6 failed" in " ".join(said.split())


def test_held_warnings_are_one_line_per_kind() -> None:
    """Negative control: the same records, not held, are one paragraph per run."""
    import io
    import logging
    import uuid

    from props.tools.command_line import run_warnings

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    old = root.handlers[:], root.level
    root.handlers[:], root.level = [handler], logging.WARNING
    log = logging.getLogger("props.reactors.launcher")
    try:
        for _ in range(5):
            log.warning("run %s could not be carried out: %s", uuid.uuid4(), "refused\n  why")
        loose = stream.getvalue().count("could not be carried out")
        with run_warnings.held() as held:
            for _ in range(5):
                log.warning("run %s could not be carried out: %s", uuid.uuid4(), "refused")
            log.warning("something else: %s", "kept")
    finally:
        root.handlers[:], root.level = old
    assert loose == 5
    assert stream.getvalue().count("could not be carried out") == 5  # none more
    assert "something else: kept" in stream.getvalue()
    assert held.lines() == ["5 x warning: run … could not be carried out: refused"]


def test_the_time_left_does_not_grow_while_nothing_finishes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from props.reactors import evaluation_driver

    clock = [100.0]
    monkeypatch.setattr("props.reactors.evaluation_driver.time.monotonic", lambda: clock[0])
    ev = SimpleNamespace(name="e", plan=SimpleNamespace(budget_usd=None))
    states = [SimpleNamespace(state=s, cost_usd=0.0) for s in ("scored", "running", "waiting")]
    progress = evaluation_driver.Progress(began=90.0)
    first = progress.line(ev, states)  # type: ignore[arg-type]
    assert first.endswith("about 20 s left")
    clock[0] = 400.0  # five minutes and nothing finished
    assert progress.line(ev, states) == first  # type: ignore[arg-type]
    states[1].state = "failed"
    assert progress.line(ev, states).endswith("1/3 done (1 scored, 0 excluded), 1 failed, 0 "  # type: ignore[arg-type]
                                              "running, 1 waiting; spent $0.00; about 155 s left")


# -- 5 and 7: tables at 80 columns keep their key columns ---------------------------------------

def _printed(columns: list[Any], rows: list[dict[str, Any]], width: int = 80,
             wide: bool = False) -> str:
    import io

    from props.tools.command_line import render

    out = io.StringIO()
    render.print_table(render.Console(width=width, file=out), columns, rows, wide=wide)
    return out.getvalue()


def _report_row(model: str, scorer: str, runs: int) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "definition": model, "scorer": scorer, "runs": runs,
                           "examples": runs // 2, "chance": 0.05, "partial": 1,
                           "known_fp": 2, "unmatched": 3, "mean_run_located": 0.4,
                           "stddev_run_located": 0.1, "located": 3, "reviewed": False,
                           "confirmed_recall": None}
    for m in ("located_recall", "above_chance", "precision"):
        row.update({m: 0.176, f"{m}_low": 0.0, f"{m}_high": 0.4})
    return row


def test_the_report_keeps_runs_beside_the_figures_at_80_columns() -> None:
    """The trap: overlap@2 over 6 runs above tiered@2 over 12, the runs column left out; and
    each interval wrapped onto a second line (`17.6% [0.0%,` / `40.0%]`): a row a line."""
    from props.tools.command_line import figure_tables

    rows = [_report_row("reference-lite", "overlap@2", 6),
            _report_row("reference-lite", "tiered@2", 12)]
    shown = _printed(figure_tables.figure_columns(rows), rows)
    lines = shown.splitlines()
    assert "6 (3)" in shown and "12 (6)" in shown
    assert all(len(line) <= 80 for line in lines)
    assert [line.split()[:2] for line in lines[2:4]] == [["reference-lite", "overlap@2"],
                                                         ["reference-lite", "tiered@2"]]
    assert lines[2].count("17.6% ±20.0") == 2  # located and precision: whole, one line
    assert "unreviewed (3)" in lines[2]  # never 0%: nobody has looked
    assert "not shown at 80 columns: precision, chance, partial" in " ".join(shown.split())
    wide = _printed(figure_tables.figure_columns(rows, wide=True), rows, width=200)
    assert "17.6% [0.0%, 40.0%]" in wide and "unreviewed (3 candidates)" in wide
    # Below its chance level, located recall is marked (the negative control: above it, not).
    low = {**rows[0], "chance": 0.5}
    assert figure_tables.BELOW in _printed(figure_tables.figure_columns([low]), [low])
    assert figure_tables.BELOW not in _printed(figure_tables.figure_columns([rows[0]]),
                                               [rows[0]]).splitlines()[2]


def test_a_wide_table_has_no_column_its_rows_do_not_carry() -> None:
    """`props eval show --wide`'s critics carry no partial, known FP, unmatched or spread (the
    report's do): found on a real evaluation, headers over empty cells. The negative control:
    the report's rows keep those columns, with their figures."""
    from props.tools.command_line import figure_tables

    report = [_report_row("baseline-ruff", "tiered@2", 8)]
    critic = {k: v for k, v in report[0].items() if k not in (
        "partial", "known_fp", "unmatched", "mean_run_located", "stddev_run_located",
        "examples", "runs")} | {"scored": 8, "cases": 8}
    shown = _printed(figure_tables.figure_columns([critic], wide=True), [critic], wide=True)
    assert "8 of 8" in shown and "chance" in shown
    for header in ("partial", "known FP", "unmatched", "run located mean"):
        assert header not in shown
    kept = _printed(figure_tables.figure_columns(report, wide=True), report, wide=True)
    assert all(h in kept for h in ("partial", "known FP", "unmatched", "run located mean"))
    assert "40.0% ± 10.0%" in kept


def test_the_reports_footer_is_short_when_the_counts_are_zero() -> None:
    from props.tools.command_line import figure_tables

    notes = {"critic_runs": 18, "states_scorer": "tiered@2", "scored": 17, "excluded": 0,
             "unfinished": 1, "not_completed": 0, "no_issues": 0, "ungraded": 0,
             "unscorable": 0, "parked": 0}
    line = figure_tables.evidence_line(notes)
    assert line == ("critic runs: 18, each in one state under tiered@2: scored 17; missing "
                    "evidence 1 (no finish event); none excluded, not completed, no issues, "
                    "ungraded, unscorable or parked")
    assert len(line) <= 3 * 80  # it took seven lines


def _case(state: str, epoch: int, why: str = "") -> dict[str, Any]:
    return {"state": state, "definition": "reference-lite", "model": "reference-lite",
            "snapshot": "notes-api/2025-10-14-00", "epoch": epoch, "run": "c55b3c55",
            "why": why}


def test_the_case_table_keeps_the_epoch_and_one_why_stays_a_table() -> None:
    """The trap: the epoch left out (two epochs looked like a duplicate row) while an empty
    `why` stayed; with one `why`, every case printed as a record of seven lines."""
    from props.tools.command_line import figure_tables
    from props.tools.command_line.render import Column

    def columns(rows: list[dict[str, Any]]) -> list[Column]:
        return [Column("state", "state"),
                *figure_tables.critic_columns(rows, optional_model=True),
                Column("snapshot", "snapshot"), Column("epoch", "epoch", justify="right"),
                Column("run", "run"), Column("why", "why", prose=True)]

    rows = [_case("scored", e) for e in (1, 2) for _ in range(10)]
    shown = _printed(columns(rows), rows)
    header = shown.splitlines()[0]
    assert "epoch" in header and "why" not in header
    rows[3] = _case("failed", 2, "launch: untrusted_local_command, exit 77")
    shown = _printed(columns(rows), rows)
    assert "epoch" in shown.splitlines()[0] and "state:" not in shown  # not records
    assert len(shown.splitlines()) <= len(rows) + 6
    assert all(len(line) <= 80 for line in shown.splitlines())


# -- 8. compare: only real changes, and what changed --------------------------------------------

def test_compare_lists_runs_whose_figures_changed_and_says_what_changed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The trap: ten runs listed as changed with equal figures, and nothing said of what."""
    import uuid

    from props.core.scoring import comparison
    from props.tools.command_line import figure_tables

    same = comparison.RunDiff(uuid.uuid4(), "m", "m", 0.5, 0.5, 0.4, 0.4, ["i3"],
                              ["i3: none -> FP zip-without-strict"])
    moved = comparison.RunDiff(uuid.uuid4(), "m", "m", 0.5, 1.0, 0.4, 0.6, ["i1"],
                               ["i1: none -> TP t1#2"])
    c = comparison.Comparison("tiered@2", "overlap@2", selected=3, unchanged=[uuid.uuid4()],
                              changed=[same, moved])
    figure_tables.print_comparison(c)
    said = " ".join(capsys.readouterr().out.split())
    assert str(moved.run_id)[:8] in said and "i1: none -> TP t1#2" in said
    assert str(same.run_id)[:8] + " i3: none -> FP zip-without-strict" in said  # counted apart
    assert "runs whose figures changed (1)" in said
    assert "1 run(s) with the same figures under both" in said
    assert "= 1 unchanged + 2 changed (1 in their figures, 1 in matches only)" in said
    assert comparison._match(("t1", 2, None)) == "TP t1#2"
    assert comparison._match((None, None, "d1")) == "FP d1"
    assert comparison._match((None, None, None)) == "none"


# -- 10. a second `props serve` says it stands by -----------------------------------------------

async def test_a_second_serve_says_it_stands_by(store: EventStore, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """The trap: the second instance printed "serving launcher, grader, ..." as the first.
    The first (negative control: the same code) says serving."""
    import logging

    import anyio

    from props.reactors.service import Service
    from props.tools.command_line.handlers import service as service_cmd

    caplog.set_level(logging.INFO, logger=service_cmd.log.name)
    only = ["grader", "supervisor", "projections"]
    first = Service(store, [LocalRuntime(tmp_path / "a")], only=only, poll_interval=0.1)
    second = Service(store, [LocalRuntime(tmp_path / "b")], only=only, poll_interval=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        assert await first.standing() == (only, [])
        tg.start_soon(second.run)
        assert await second.standing() == ([], only)
        await service_cmd._say_standing(first, "local")
        await service_cmd._say_standing(second, "local")
        tg.cancel_scope.cancel()
    said = [r.getMessage() for r in caplog.records if r.name == service_cmd.log.name]
    assert said[0].startswith("serving grader, supervisor, projections; runtimes: local")
    assert said[1].startswith("standing by for grader, supervisor, projections: another "
                              "props serve is active")


def test_eval_compare_pairs_per_example_with_each_sides_interval() -> None:
    """The trap: no per-example rows (README: "paired, per example") and no interval on
    either side's precision."""
    from props.projections import evaluation_scores

    # Each example's sums: recalled, expected, true positives, reported, chance's recalled.
    a = {("s1", None): [2.0, 3.0, 2.0, 4.0, 0.0], ("s2", "h"): [0.0, 1.0, 0.0, 2.0, 0.0],
         ("s3", None): [1.0, 1.0, 1.0, 1.0, 0.0]}
    b = {("s1", None): [3.0, 3.0, 3.0, 3.0, 0.0], ("s2", "h"): [1.0, 1.0, 1.0, 1.0, 0.0]}
    row = evaluation_scores.paired(a, b)
    assert row["examples"] == 2 and row["only_a"] == 1
    assert row["per_example"] == [
        {"snapshot": "s1", "files_hash": None, "located_recall_a": 2 / 3, "located_recall_b": 1.0,
         "precision_a": 0.5, "precision_b": 1.0},
        {"snapshot": "s2", "files_hash": "h", "located_recall_a": 0.0, "located_recall_b": 1.0,
         "precision_a": 0.0, "precision_b": 1.0}]
    for side in ("a", "b"):
        assert row[f"precision_{side}_low"] is not None
        assert row[f"precision_{side}_low"] <= row[f"precision_{side}"] \
            <= row[f"precision_{side}_high"]


# -- also: `runs show` at 80 columns -------------------------------------------------------------

def test_runs_show_tells_the_reported_issues_once() -> None:
    """The trap: 9 issues took 99 lines, each issue told again in the timeline."""
    from props.tools.command_line.handlers import runs as runs_cmd

    def event(version: int, kind: str, **data: Any) -> dict[str, Any]:
        return {"version": version, "recorded_at": None, "type": kind, "data": data}

    timeline = [event(1, "run.started", digest="d"),
                *(event(1 + n, "issue.reported", issue_id=f"i{n}", rationale="x" * 300)
                  for n in range(1, 10)),
                event(11, "phase.completed", phase="review"),
                event(12, "issue.reported", issue_id="late")]
    rows = runs_cmd._compact(timeline)
    assert [(r["version"], r["type"]) for r in rows] == [
        (1, "run.started"), ("2-10", "issue.reported"), (11, "phase.completed"),
        (12, "issue.reported")]
    assert rows[1]["data"] == {"issues": "9: i1 i2 i3 i4 i5 i6 i7 i8 i9 (each in the table "
                                         "above)"}
    assert timeline[1]["data"]["issue_id"] == "i1"  # the log's own rows are not changed


# -- 5. a report row over two digests: tests/test_newcomer_details.py (a row per digest) --


# -- the demo on a machine whose engine does not answer (issue 43, item 2) ----------------------

def _dead_socket(folder: Path) -> Path:
    """A socket file nothing listens on: DOCKER_HOST names an engine (configured), and a
    connection is refused."""
    path = folder / "dead.sock"
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(path))
    return path


async def test_the_demo_runs_locally_when_no_engine_answers(empty_dsn: str,
                                                            tmp_path: Path) -> None:
    """The demo asks the engine once; none answers: every critic and the baseline run as
    local processes, and it says so in one line. On the old code it exited 70 (the engine
    was configured, so the demo built Docker images on it)."""
    dead = _dead_socket(tmp_path)
    out = props("demo", dsn=empty_dsn, timeout=600,
                env={"PROPS_HOME": str(tmp_path / "home"), "DOCKER_HOST": f"unix://{dead}"})
    assert out.returncode == 0, out.stderr[-3000:]
    said = [line for line in out.stdout.splitlines() if "no Docker engine answers" in line]
    assert len(said) == 1, out.stdout
    assert "runtime: local" in out.stdout and "baseline-ruff" in out.stdout
    async with open_store(empty_dsn) as store:
        pushed = await definitions.all_pushed(store, "critic")
    assert {d.runtime for d in pushed} == {"local"}


def test_a_baseline_push_falls_back_to_local_only_when_no_engine_answers(
        dsn: str, tmp_path: Path) -> None:
    dead = f"unix://{_dead_socket(tmp_path)}"
    out = props("definitions", "baseline", "ruff", dsn=dsn, env={"DOCKER_HOST": dead})
    assert out.returncode == 0, out.stderr
    assert "(local)" in out.stdout and out.stdout.count("no Docker engine answers") == 1
    asked = props("definitions", "baseline", "ruff", "--local", dsn=dsn,
                  env={"DOCKER_HOST": dead})
    assert asked.returncode == 0 and "no Docker engine answers" not in asked.stdout
    demanded = props("definitions", "baseline", "ruff", "--docker", dsn=dsn,
                     env={"DOCKER_HOST": dead})
    assert demanded.returncode == 69, demanded.stderr  # (unavailable)


@pytest.mark.docker
async def test_a_baseline_push_is_the_container_baseline_when_an_engine_answers(
        dsn: str, docker: DockerRuntime, tmp_path: Path) -> None:
    """The default: an engine answers, so the tool's imports run in a container (the old
    default pushed the local command whatever the machine had)."""
    out = props("definitions", "baseline", "pylint", dsn=dsn, timeout=300,
                env={"PROPS_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr
    assert "critic baseline-pylint:docker (docker)" in out.stdout, out.stdout
    assert "no Docker engine answers" not in out.stdout

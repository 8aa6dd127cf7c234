"""The leftovers of issue 45 ("The first hour without a trap"), one test each, with the
negative control beside each behaviour (what the old code did, run or stated):

1. `props report` is a row per definition digest, never pooled, and keeps `runs` at 80.
2. `--run` of rescore, compare and eval-located takes a run id prefix, as `runs` does.
3. `props runs list` never leaves out the issue count at 80 columns.
4. An unknown scorer exits 66 wherever a scorer is named.
5. `props scorers eval` measures no agreement from one draw.
6. `props eval compare` says each side's chance level and recall above it.
8. Migration numbers may skip; a late lower number is refused; `props db status` notes gaps.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import itertools
import uuid
from pathlib import Path
from typing import Any

import pytest

from props.core.domain import catalog, definitions
from props.core.domain.specimens import specimens
from props.core.log import database, errors, migrate
from props.core.log.store import EventStore
from props.core.scoring import evaluation
from props.projections import engine, evaluation_scores
from props.tools.bundled import samples
from props.tools.command_line import render
from props.tools.command_line.figure_tables import critic_columns
from props.tools.command_line.render import Column
from tests.reactor_helpers import SNAPSHOT, eventually, finished, request
from tests.test_cli import props

# -- 1. a report row per definition digest ----------------------------------------------------


async def test_a_definition_pushed_twice_is_two_report_rows(
        served: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trap: `reference` pooled the demo's digest with one pushed later into one row over
    both (the old code's row had runs == 2; test_first_hour held that, with a note)."""
    from props.projections import figures
    from props.tools.command_line import figure_tables

    store = served
    await definitions.push(store, definitions.reference_local())
    second = definitions.reference_local("critic", {"checks": ["open-without-with"]})
    await definitions.push(store, second.model_copy(update={"tag": "lite"}))
    ids = [*await request(store, "reference", ref="local", model="reference", budget=0),
           *await request(store, "reference", ref="lite", model="reference", budget=0)]
    # The first digest on a second snapshot too: a report of that snapshot alone holds one
    # digest of `reference`, and names it `reference` (the split is the scope's, not the
    # database's: the quickstart's `props definitions reference` after the demo split the
    # demo's own report).
    other = next(s.slug for s in specimens.load_valid(samples.samples_dir())
                 if s.slug != SNAPSHOT)
    alone = uuid.uuid4()
    await store.append(f"run-{alone}", [catalog.RunRequested(
        run_id=alone, agent_type="critic", definition="reference", definition_ref="local",
        example=catalog.Example(snapshot=other), model="reference", timeout_seconds=300,
        budget_usd=0)])
    ids.append(alone)
    await finished(store, ids)
    records: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}

    async def three_runs() -> bool:
        got, said = await figures.load(store)
        records[:] = got
        notes.update(said)
        return bool(sum(r["runs"] for r in got if r["scorer"] == got[0]["scorer"]) >= 3)
    await eventually(three_runs)
    rows = [r for r in records if r["scorer"] == records[0]["scorer"]]
    assert sorted(r["runs"] for r in rows) == [1, 2]
    assert len({r["digest"] for r in rows}) == 2 and all(r["digest"] for r in rows)
    assert all(r["definition"].startswith("reference (") for r in rows)
    assert all(r["definition"].endswith(f"{r['digest'][:12]})") for r in rows)
    scoped, _ = await figures.load(store, scope=figures.Scope(snapshot=other))
    assert [(r["definition"], r["digest"], r["runs"]) for r in scoped
            if r["scorer"] == rows[0]["scorer"]] == [("reference", None, 1)]

    out = io.StringIO()
    console = render.Console(width=80, file=out)
    monkeypatch.setattr(figure_tables, "Console", lambda: console)
    figure_tables.print_report(rows, notes)
    text = out.getvalue()
    assert "runs (ex.)" in text or "runs (examples)" in text, text  # runs kept at 80
    assert all(r["definition"] in text for r in rows), text
    assert "each digest a row of its own" in text
    assert max(len(line) for line in text.splitlines()) <= 80, text


# -- 2. run id prefixes where runs are selected -----------------------------------------------


async def _runs_with_ids(store: EventStore, ids: list[uuid.UUID]) -> None:
    for run_id in ids:
        await store.append(f"run-{run_id}", [catalog.RunRequested(
            run_id=run_id, agent_type="critic", definition="reference",
            definition_ref="local", example=catalog.Example(snapshot=SNAPSHOT),
            model="m", timeout_seconds=60, budget_usd=0)])


@pytest.mark.parametrize("command", [
    ["rescore", "--scorer", "overlap@2", "--dry-run"],
    ["compare", "overlap@1", "overlap@2"],
    ["scorers", "eval-located", "tiered@2", "--scorer", "overlap@2"]])
async def test_a_run_id_prefix_selects_a_run(store: EventStore, dsn: str,
                                             command: list[str]) -> None:
    """Unique: resolved (the old parser refused anything but a whole UUID, exit 2);
    ambiguous: 65 naming how many; unknown: 66."""
    twins = [uuid.UUID("abcd0000-0000-4000-8000-000000000001"),
             uuid.UUID("abcd0000-0000-4000-8000-000000000002"),
             uuid.UUID("abcd0000-0000-4000-8000-000000000003")]
    alone = uuid.UUID("beef0000-0000-4000-8000-000000000001")
    await _runs_with_ids(store, [*twins, alone])
    await engine.rebuild(store)
    ambiguous = props(*command, "--run", "abcd", dsn=dsn)
    assert ambiguous.returncode == 65, ambiguous.stderr
    assert "abcd is the start of 3 run ids" in ambiguous.stderr
    assert len(ambiguous.stderr.splitlines()) == 1
    unknown = props(*command, "--run", "cafe", dsn=dsn)
    assert unknown.returncode == 66 and "no run id starts with cafe" in unknown.stderr
    unique = props(*command, "--run", "beef", dsn=dsn)
    assert unique.returncode not in (2, 65, 66, 70), unique.stderr
    assert "start of" not in unique.stderr and "no run id" not in unique.stderr
    # On the old parser the prefix was not a run id at all:
    old = props(*command, "--run", str(alone), dsn=dsn)
    assert old.returncode == unique.returncode, (old.stderr, unique.stderr)


# -- 3. runs list keeps the issue count ---------------------------------------------------------


def _run_rows() -> list[dict[str, Any]]:
    """A demo's runs: the critic's name is its model; snapshots as the samples name them."""
    return [{"run_id": uuid.uuid4(), "status": "succeeded", "definition": d, "model": d,
             "snapshot": s, "issues": 12, "located_recall": 1.0, "precision": 0.25,
             "scorer": "tiered@2", "requested_at": dt.datetime(2026, 12, 5, tzinfo=dt.UTC)}
            for d in ("reference", "reference-lite", "ruff")
            for s in ("notes-api/2025-10-14-00", "csvtool/2025-09-03-00")]


def _runs_table(columns: list[Column]) -> str:
    rows = _run_rows()
    out = io.StringIO()
    render.print_table(render.Console(width=80, file=out),
                       [*columns[:2], *critic_columns(rows), *columns[2:]], rows)
    return out.getvalue()


def test_runs_list_keeps_the_issue_count_at_80_columns() -> None:
    from props.tools.command_line.handlers import runs

    text = _runs_table(runs.RUN_COLUMNS)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split()[:1] == ["run"] and "#" in lines[0].split(), text  # a table
    assert "#: issues" in text and "not shown at 80 columns: requested, scored by" in text
    # Negative control: the column as it was (optional, no short header) was left out.
    old = [dataclasses.replace(c, optional=True, short=None) if c.key == "issues" else c
           for c in runs.RUN_COLUMNS]
    assert "not shown at 80 columns: issues" in _runs_table(old)


# -- 4. an unknown scorer exits 66 -----------------------------------------------------------


@pytest.mark.parametrize("command", [
    ["rescore", "--scorer", "nope@1", "--all", "--dry-run"],
    ["compare", "nope@1", "overlap@2", "--all"],
    ["compare", "overlap@2", "nope@1", "--all"],
    ["scorers", "register", "nope@1"],
    ["scorers", "activate", "nope@1"],
    ["scorers", "eval", "--scorer", "nope@1"],
    ["scorers", "eval-located", "nope@1", "--scorer", "overlap@2"],
    ["scorers", "eval-located", "tiered@2", "--scorer", "nope@1"],
    ["report", "--scorer", "nope@1"],
    ["review", "next", "--scorer", "nope@1"]])
async def test_an_unknown_scorer_exits_66_wherever_named(store: EventStore, dsn: str,
                                                         command: list[str]) -> None:
    """One code for a scorer that is not there, as for a run or a definition (the old code
    exited 65 here: UnknownScorer.exit_code was EX_DATAERR)."""
    await engine.rebuild(store)
    out = props(*command, dsn=dsn)
    assert out.returncode == 66, (command, out.returncode, out.stderr)
    assert "nope" in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert errors.UnknownScorer.exit_code == errors.NotFound.exit_code


# -- 5. agreement needs two draws --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Coin:
    """A scorer that is not deterministic: it answers each issue alike or not, by turn."""

    name: str = "coin"
    version: int = 1
    deterministic: bool = False
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)


async def test_one_draw_measures_no_agreement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked once, a scorer agrees with itself on every issue: the old code said 100.0%."""
    turn = itertools.count()

    async def answers(s: Any, case: evaluation.Case) -> dict[str, str]:
        return {i: "none" if next(turn) % 2 else "fp:x" for i in case.expect}
    monkeypatch.setattr(evaluation, "_answers", answers)
    cases = evaluation.load(samples.cases_dir())
    once = await evaluation.evaluate(_Coin(), cases, draws=1)  # type: ignore[arg-type]
    assert once.agreement is None and once.summary()["agreement"] is None
    twice = await evaluation.evaluate(_Coin(), cases, draws=2)  # type: ignore[arg-type]
    assert twice.agreement is not None and twice.agreement < 1


def test_scorers_eval_says_n_a_for_one_draw(capsys: pytest.CaptureFixture[str]) -> None:
    from props.tools.command_line.handlers import scorer_eval

    result = evaluation.Result("coin@1", deterministic=False, issues=3)
    scorer_eval._print([result], [], wide=True)
    assert "coin@1: agreement across draws n/a (one draw" in " ".join(
        capsys.readouterr().out.split())


# -- 6. eval compare: chance on each side ------------------------------------------------------


def test_eval_compare_says_chance_and_above_chance_for_each_side() -> None:
    from props.tools.command_line.handlers import evaluations

    # per example: recalled, expected, finds, graded, chance_recalled
    csv, log = ("csvtool/1", None), ("logparse/1", None)
    a: dict[evaluation_scores.Example, list[float]] = {
        csv: [2.0, 4.0, 2.0, 4.0, 1.0], log: [1.0, 4.0, 1.0, 2.0, 1.0]}
    b: dict[evaluation_scores.Example, list[float]] = {
        csv: [4.0, 4.0, 4.0, 4.0, 1.0], log: [3.0, 4.0, 3.0, 3.0, 1.0]}
    row = evaluation_scores.paired(a, b)
    assert row["chance_a"] == pytest.approx(0.25) and row["chance_b"] == pytest.approx(0.25)
    assert row["above_chance_a"] == pytest.approx(3 / 8 - 0.25)
    assert row["above_chance_b"] == pytest.approx(7 / 8 - 0.25)
    assert row["above_chance_b_low"] is not None
    row.update(a={"evaluation": "e1", "definition": "reference"},
               b={"evaluation": "e2", "definition": "reference-lite"})
    lines = evaluations._chance_lines(row)
    assert lines == [
        f"A e1:reference: chance 25.0%, above chance 12.5% "
        f"[{100 * row['above_chance_a_low']:.1f}%, {100 * row['above_chance_a_high']:.1f}%]",
        f"B e2:reference-lite: chance 25.0%, above chance 62.5% "
        f"[{100 * row['above_chance_b_low']:.1f}%, {100 * row['above_chance_b_high']:.1f}%]"]
    assert all(len(line) <= 80 for line in lines)
    # A side with a run whose chance level is not recorded has none (never a guess).
    missing = evaluation_scores.paired(a, b, (1, 0))
    assert missing["chance_a"] is None and missing["chance_b"] is not None


# -- 8. migration numbering ---------------------------------------------------------------------


def _shipped_with(*extra: migrate.Migration) -> list[migrate.Migration]:
    return sorted([*_REAL, *extra], key=lambda m: m.version)


_REAL = migrate.available()
_TOP = _REAL[-1].version


async def test_migration_numbers_may_skip_but_not_come_late(
        dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A skipped number is fine (the old `available()` refused any gap: "migration numbers
    must be 1, 2, 3, ... without gaps"); a file numbered below one applied, added later,
    is refused in one line rather than run after the migrations meant to follow it."""
    from props.tools.command_line.handlers import db

    after = migrate.Migration(_TOP + 2, f"{_TOP + 2:04d}_after_a_gap.sql",
                              "CREATE TABLE public.after_a_gap (x int);")
    monkeypatch.setattr(migrate, "available", lambda: _shipped_with(after))
    async with database.session(dsn) as conn:
        done = await migrate.migrate(conn)
        assert [m.name for m in done] == [after.name]
        states = await migrate.status(conn)
        assert migrate.gaps(states) == [_TOP + 1]
        assert {s.state for s in states} == {"applied"}

    monkeypatch.setenv("PROPS_DSN", dsn)
    args = type("Args", (), {"format": "table", "wide": True})()
    assert await db.status_cmd(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"numbering skips {_TOP + 1:04d}" in said

    late = migrate.Migration(_TOP + 1, f"{_TOP + 1:04d}_late.sql",
                             "CREATE TABLE public.late (x int);")
    monkeypatch.setattr(migrate, "available", lambda: _shipped_with(after, late))
    async with database.session(dsn) as conn:
        with pytest.raises(errors.SchemaError) as refused:
            await migrate.migrate(conn)
        assert await conn.fetchval("SELECT to_regclass('public.late')") is None
        assert [s.state for s in await migrate.status(conn)
                if s.version == late.version] == ["late"]
    message = str(refused.value)
    assert "\n" not in message and late.name in message
    assert f"renumber it above {_TOP + 2:04d}" in message


def test_two_files_of_one_number_are_refused(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    twin = migrate.Migration(_TOP, f"{_TOP:04d}_twin.sql", "SELECT 1;")
    folder = tmp_path / "migrations"
    folder.mkdir()
    for m in [*_REAL, twin]:
        (folder / m.name).write_text(m.sql)
    monkeypatch.setattr("props.core.log.migrate.resources.files",
                        lambda package: type("R", (), {"joinpath": lambda self, n: folder})())
    with pytest.raises(errors.SchemaError, match="share the number"):
        migrate.available()


# -- 7. container names carry the deployment ---------------------------------------------------


async def test_two_deployments_never_share_a_container_name(store: EventStore,
                                                            empty_dsn: str) -> None:
    """A copy of a database holds the same run ids; by run id alone (the old
    `props-run-<run id>`) its launcher took the other's container for its own."""
    from props.core.domain.store import open_store
    from props.reactors.launcher import run_specs

    await migrate.migrate_database(empty_dsn)
    async with open_store(empty_dsn) as other:
        theirs = await run_specs.deployment_of(other)
    ours = await run_specs.deployment_of(store)
    assert ours != theirs and ours == await run_specs.deployment_of(store)  # stable
    run = uuid.uuid4()
    mine, yours = run_specs.container_name(ours, run), run_specs.container_name(theirs, run)
    assert mine == f"props-run-{ours}-{run}" and mine != yours
    assert run_specs.run_of_container(mine) == run_specs.run_of_container(yours) == run
    assert run_specs.run_of_container(f"props-run-{run}") == run  # named before the change

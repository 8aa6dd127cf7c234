"""Output people can read, on a database of long names (40-character models with `[/x]`
markup, a snapshot slug with dashes).

Every table fits the terminal without splitting a name: each listing and report command, at
80 and at 120 columns, shows every name its JSON output holds whole on one line, and no line
wider than the terminal (negative control: the same rows in a table built as props built
them before, rich's borders and cells folded to fit, split a name, and the check says so).
The help of every command wraps at 80 columns. One figure has one interval: the report,
compare, an evaluation's report, the API and the viewer's scores page give the same."""

from __future__ import annotations

import argparse
import html
import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import rich.console
import rich.table

from props.core.domain import definitions, tokens
from props.core.log.store import EventStore
from props.core.scoring import intervals, rescoring, scorers
from props.projections import engine
from props.tools import cli
from props.tools.bundled import samples
from props.tools.http.app import create_app
from tests.conftest import once_per_ci
from tests.test_cli import props
from tests.test_evaluations import LITE
from tests.test_viewer import sign_in

pytestmark = once_per_ci  # what it checks does not depend on the server's kind

MODEL = "[/x]gpt-4o-2024-08-06-extended-context-xl"  # 40 characters, markup included
LITE_MODEL = "[/x]reference-lite-with-its-own-long-name"
LONG_PROJECT = "notes-api-with-a-long-project-name"
# The keys whose values are names a table must show whole (a run id as its 8 first digits).
NAMES = {"model", "definition", "snapshot", "slug", "scorer", "reactor", "projection",
         "evaluation", "run_id", "issue_id", "name"}


def names_in(doc: Any) -> Iterator[str]:
    """Every name in a command's JSON output (see NAMES)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in NAMES and isinstance(value, str) and value:
                yield value[:8] if key == "run_id" else value
            else:
                yield from names_in(value)
    elif isinstance(doc, list):
        for item in doc:
            yield from names_in(item)


def split_names(table: str, names: set[str], width: int) -> list[str]:
    """What is wrong with a table's text: each name not whole on one line, and each line
    wider than the terminal."""
    lines = table.splitlines()
    wrong = [f"not whole on a line: {n!r}" for n in sorted(names)
             if not any(n in line for line in lines)]
    return wrong + [f"{len(line)} columns wide: {line!r}" for line in lines
                    if len(line) > width]


def _snapshots(tmp_path: Path) -> Path:
    """The bundled samples, one of them under a long project name with dashes."""
    folder = tmp_path / "specimens"
    shutil.copytree(samples.samples_dir(), folder)
    (folder / "notes-api").rename(folder / LONG_PROJECT)
    return folder


async def _database(store: EventStore, dsn: str, tmp_path: Path) -> dict[str, str]:
    """An evaluation of two critics with long model names, graded by two scorers."""
    synced = props("specimens", "sync", str(_snapshots(tmp_path)), dsn=dsn)
    assert synced.returncode == 0, synced.stderr
    await definitions.push(store, definitions.reference_local())
    lite = definitions.reference_local(config=LITE)
    await definitions.push(store, lite.model_copy(update={"name": "reference-lite"}))
    plan = tmp_path / "plan.toml"
    plan.write_text(
        f'name = "long-names-evaluation"\nexamples = ["csvtool/*", "{LONG_PROJECT}/*"]\n'
        f'[[critic]]\ndefinition = "reference"\nref = "local"\nmodel = {json.dumps(MODEL)}\n'
        f'[[critic]]\ndefinition = "reference-lite"\nref = "local"\n'
        f"model = {json.dumps(LITE_MODEL)}\n")
    ran = props("eval", "run", str(plan), "--runtime", "local", dsn=dsn,
                env={"PROPS_HOME": str(tmp_path / "home")})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    await rescoring.rescore(store, scorers.scorer("tiered@1"),
                            rescoring.Selection(everything=True))
    await engine.rebuild(store)
    runs = json.loads(props("runs", "list", "--json", dsn=dsn).stdout)
    with_issues = next(r for r in runs if r["issues"] and r["model"] == MODEL)
    return {"run": with_issues["run_id"][:8], "slug": with_issues["snapshot"]}


def _commands(found: dict[str, str]) -> list[list[str]]:
    return [
        ["report"], ["report", "--scorer", "tiered@1"], ["compare", "tiered@1", "tiered@2",
                                                         "--all"],
        ["runs", "list"], ["runs", "show", found["run"]], ["definitions", "list"],
        ["eval", "show", "long-names-evaluation"], ["eval", "list"],
        ["eval", "compare", "long-names-evaluation:reference",
         "long-names-evaluation:reference-lite"],
        ["specimens", "list"], ["specimens", "show", found["slug"]], ["scorers", "list"],
        ["scorers", "eval"], ["reactors", "status"], ["projections", "status"],
        ["db", "status"], ["tokens", "list"], ["archive", "--status"], ["events", "types"]]


@pytest.mark.slow
async def test_every_table_shows_every_name_whole_at_80_and_120_columns(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    found = await _database(store, dsn, tmp_path)
    checked = 0
    for command in _commands(found):
        as_json = props(*command, "--json", dsn=dsn)
        assert as_json.returncode in (0, 1), (command, as_json.stderr)
        names = set(names_in(json.loads(as_json.stdout)))  # one document, nothing else
        for width in (80, 120):
            table = props(*command, dsn=dsn, env={"COLUMNS": str(width)})
            assert table.returncode == as_json.returncode, (command, table.stderr)
            assert split_names(table.stdout, names, width) == [], (command, width,
                                                                   table.stdout)
            checked += len(names)
        wide = props(*command, "--wide", dsn=dsn, env={"COLUMNS": "80"})
        assert wide.returncode == as_json.returncode and not split_names(
            wide.stdout, names, 10_000), (command, wide.stdout)
    assert checked > 100  # the check looked at names, not at empty tables
    shown = props("runs", "list", "--model", MODEL, "--json", dsn=dsn)
    assert {r["model"] for r in json.loads(shown.stdout)} == {MODEL}  # the filter holds

    # Negative control: the report's rows as props printed them before (rich's borders,
    # every cell folded to fit) split the 40-character name at 80 columns.
    rows = json.loads(props("report", "--json", dsn=dsn).stdout)["scores"]
    old = rich.table.Table("model", "definition", "scorer", "runs (examples)",
                           "recall [95% CI]", "precision [95% CI]")
    for r in rows:
        old.add_row(r["model"], r["definition"], r["scorer"], f"{r['runs']} ({r['examples']})",
                    f"{r['located_recall']:.1%} [{r['located_recall_low']}, "
                    f"{r['located_recall_high']}]",
                    f"{r['precision']:.1%} [{r['precision_low']}, {r['precision_high']}]")
    for column in old.columns:
        column.overflow = "fold"
    out = rich.console.Console(width=80, file=io.StringIO(), markup=False)
    out.print(old)
    assert any("not whole" in w for w in split_names(
        out.file.getvalue(), set(names_in(rows)), 80))  # type: ignore[attr-defined]


def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, Any]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_commands_help_wraps_at_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    wrong, seen = [], 0
    for path, parser in _parsers(cli.build_parser(), "props"):
        seen += 1
        for line in parser.format_help().splitlines():
            if len(line) > 80 or "%%" in line:
                wrong.append(f"{path}: {line}")
    assert seen > 60 and wrong == []
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: paragraphs, not 80 columns
    report = dict(_parsers(cli.build_parser(), "props"))["props report"].format_help()
    assert max(len(line) for line in report.splitlines()) > 100



# What the report, an evaluation and the API call a location rule's recall (never "recall").
NAMED = {"recall": "located_recall"}


def _bounds(low: float | None, high: float | None) -> tuple[str, str]:
    """An interval as every output prints it (to a tenth of a percent)."""
    return tuple("-" if v is None else f"{100 * v:.1f}%" for v in (low, high))  # type: ignore[return-value]


@pytest.mark.slow
async def test_one_figure_has_one_interval_in_every_output(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    """The same recall and precision in the report, compare (each side), an evaluation's
    report, the API and the viewer's scores page: the same interval, the method named."""
    await _database(store, dsn, tmp_path)

    def as_json(*command: str) -> Any:
        done = props(*command, "--json", dsn=dsn)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    seen: dict[tuple[str, str, str, str], set[tuple[Any, ...]]] = {}

    def saw(source: str, scorer: str, critic: str, measure: str, bounds: Any) -> None:
        seen.setdefault((scorer, critic, measure, "bounds"), set()).add(bounds)
        seen.setdefault((scorer, critic, measure, "sources"), set()).add((source,))

    for scorer in ("tiered@1", "tiered@2"):
        report = as_json("report", "--scorer", scorer)
        assert report["evidence"]["interval_method"] == intervals.METHOD
        for r in report["scores"]:
            for m in ("recall", "precision"):
                k = NAMED.get(m, m)
                saw("report", scorer, r["model"], m, (r[f"{k}_low"], r[f"{k}_high"]))
    compared = as_json("compare", "tiered@1", "tiered@2", "--all")
    for g in compared["groups"]:
        for side, scorer in (("a", "tiered@1"), ("b", "tiered@2")):
            for m in ("recall", "precision"):
                saw("compare", scorer, g["model"], m,
                    (g[f"{m}_{side}_low"], g[f"{m}_{side}_high"]))
    evaluation = as_json("eval", "show", "long-names-evaluation")
    assert evaluation["interval"] == intervals.METHOD
    for c in evaluation["critics"]:
        for m in ("recall", "precision"):
            k = NAMED.get(m, m)
            saw("eval", evaluation["scorer"], c["model"], m, (c[f"{k}_low"], c[f"{k}_high"]))
    _, secret = await tokens.create(store, "reader", ("read",))
    app = create_app(store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://props") as api:
        assert (await sign_in(api, secret)).status_code == 303  # (the viewer's session)
        for scorer in ("tiered@1", "tiered@2"):
            answer = (await api.get("/api/scores", params={"scorer": scorer}, headers={
                "Authorization": f"Bearer {secret}"})).json()
            for r in answer["scores"]:
                for m in ("recall", "precision"):
                    k = NAMED.get(m, m)
                    saw("api", scorer, r["model"], m, (r[f"{k}_low"], r[f"{k}_high"]))
            page = (await api.get("/scores", params={"scorer": scorer})).text
            assert intervals.METHOD in page
            for model in (MODEL, LITE_MODEL):
                for m in ("recall", "precision"):
                    shown = "located recall" if m == "recall" else m
                    label = re.search(rf'aria-label="{shown} [^"]*, interval ([^ ]+) to ([^"]+)"',
                                      page[page.index(html.escape(model)):])
                    assert label, (scorer, model, m)
                    seen.setdefault((scorer, model, m, "printed"), set()).add(label.groups())
    pairs = {k[:3] for k in seen}
    assert len(pairs) == 8  # two scorers x two critics x two measures
    for key in pairs:
        bounds = seen[(*key, "bounds")]
        assert len(bounds) == 1, (key, bounds)  # every source gave the same numbers
        assert seen[(*key, "sources")] >= {("report",), ("compare",), ("api",)}, key
        [(low, high)] = bounds
        assert low is not None and high is not None, key  # two examples: an interval
        printed = seen.get((*key, "printed"))
        assert printed == {_bounds(low, high)}, (key, printed)  # the viewer shows them

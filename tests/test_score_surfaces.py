"""One question, one set of figures: `props report --eval E --format json`, the API's
`GET /api/scores?evaluation=E` and the viewer's scores page give the same recall, chance and
precision per model, definition and scorer, and the same evidence (every run in one state),
for an evaluation that ended with cases missing, one still running and one stopped on errors
(props.projections.figures computes them; its breakdown per snapshot and per day too).

The negative control: a planted second answer (a viewer whose figures drop the evaluation's
scope) is seen to differ. Before the read models the viewer ran the breakdown's statements
itself (the layers test's SQL check finds them on that code)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from props.core.domain import definitions, tokens
from props.core.log.store import EventStore
from props.core.scoring import registration, rescoring, scorers
from props.projections import evaluation_standing, figures
from props.reactors import evaluation_driver as driver
from props.tools.http.app import create_app
from props.tools.http.viewer import scores as viewer_scores
from props.tools.http.viewer import templating
from tests.conftest import rebuilt
from tests.reactor_helpers import sync_samples
from tests.test_evaluation_standing import _evaluation, _failed
from tests.test_viewer import sign_in

NAMES = ("ended", "running", "failed")


def _plain(value: Any) -> Any:
    """A value as JSON carries it (what the CLI prints and the API sends)."""
    return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))


def _cli(dsn: str, home: Path, name: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "props.tools.cli", "report", "--eval", name, "--format",
         "json"], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


async def _three_evaluations(store: EventStore) -> None:
    """Ended with cases missing, running, stopped on errors; their finished runs scored
    under the active scorer."""
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    ended = await _evaluation(store, "ended")
    await driver.end_drive(store, ended, "complete")  # (recorded as incomplete)
    await _evaluation(store, "running")
    failed = await _evaluation(store, "failed")
    await _failed(store, failed)
    await driver.end_drive(store, failed, "stopped_on_errors")
    await rebuilt(store)  # (after the fence: a shared server's other writers hold it)
    await rescoring.rescore(store, scorers.scorer("tiered@2"),
                            rescoring.Selection(everything=True))
    await registration.activate(store, "tiered", 2)
    await rebuilt(store)


async def _surfaces(store: EventStore, dsn: str, home: Path, captured: list[dict[str, Any]],
                    names: tuple[str, ...] = NAMES,
                    ) -> dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """Each evaluation's figures as the CLI, the API and the viewer have them."""
    _, secret = await tokens.create(store, f"ada-{len(captured)}", ("read",))
    transport = httpx.ASGITransport(app=create_app(store))
    seen = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://props") as api, \
            httpx.AsyncClient(transport=transport, base_url="http://viewer") as viewer:
        assert (await sign_in(viewer, secret)).status_code == 303
        for name in names:
            answer = await api.get("/api/scores", params={"evaluation": name},
                                   headers={"Authorization": f"Bearer {secret}"})
            assert answer.status_code == 200, answer.text
            page = await viewer.get("/scores", params={"evaluation": name})
            assert page.status_code == 200, page.text[:300]
            shown = captured[-1]
            rows = [{k: v for k, v in r.items() if not k.endswith("_plot")}
                    for r in shown["rows"]]
            seen[name] = (_cli(dsn, home, name), answer.json(),
                          _plain({"scores": rows, "evidence": shown["notes"],
                                  "per_snapshot": shown["per_snapshot"]}))
    return seen


async def test_the_cli_the_api_and_the_viewer_give_one_set_of_figures(
        store: EventStore, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _three_evaluations(store)
    captured: list[dict[str, Any]] = []
    render = templating.page  # (what the pages call)

    def capture(request: Any, template: str, status: int = 200, **context: Any) -> Any:
        captured.append(context)
        return render(request, template, status, **context)

    monkeypatch.setattr(viewer_scores, "page", capture)
    seen = await _surfaces(store, dsn, tmp_path / "home", captured)
    for name, (cli, from_api, from_viewer) in seen.items():
        assert from_api == cli, name
        assert from_viewer["scores"] == cli["scores"], name
        assert from_viewer["evidence"] == cli["evidence"], name
        runs = await evaluation_standing.counted_runs(store, name)
        split = await figures.breakdown(store, ("tiered", 2), runs)
        assert from_viewer["per_snapshot"] == _plain(split.per_snapshot), name
        standing = await evaluation_standing.named(store, name)
        assert standing.scorer == "tiered@2", name
    for name in NAMES:  # each has a scored run (its first case): its figures are there
        cli = seen[name][0]
        assert [(r["scorer"], r["runs"]) for r in cli["scores"]] == [("tiered@2", 1)], name
        # (no issue reported: nothing found, by chance neither, and no precision to speak of)
        assert [{k: r[k] for k in ("located_recall", "chance", "precision")}
                for r in cli["scores"]] == [{"located_recall": 0, "chance": 0, "precision": None}]
    # The negative control: a viewer with an answer of its own (figures over every run, its
    # evaluation filter dropped) is seen to differ from the CLI's.
    whole = figures.load

    async def unscoped(store: EventStore, *args: Any, scope: figures.Scope = figures.EVERYTHING,
                       ) -> Any:
        return await whole(store, *args)

    monkeypatch.setattr(viewer_scores, "figures", types.SimpleNamespace(
        load=unscoped, breakdown=figures.breakdown, Scope=figures.Scope))
    planted = await _surfaces(store, dsn, tmp_path / "home", captured, ("ended",))
    cli, _, from_viewer = planted["ended"]
    assert from_viewer["scores"] != cli["scores"]
    assert [r["runs"] for r in from_viewer["scores"]] == [3]

"""One run, one page: `props runs show --format json`, the API's `GET /api/runs/{id}` and the
viewer's run page show the same status, scorer, recall, chance and precision, and the CLI and
the viewer the same issues and the same defects not found, for a graded run and for a run the
projections have not caught up with (props.projections.run_pages.shown computes the page once).

The negative control: before the read model, `GET /api/runs/{id}` gave neither the scorer nor
its figures of the run (only the CLI and the viewer computed them, each its own way): the
first assertion on the API's answer fails on that code (its keys lack `scorer`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from props.core.domain import catalog, streams, tokens
from props.core.log.store import EventStore
from props.tools.http.app import create_app
from props.tools.http.viewer import runs as viewer_runs
from props.tools.http.viewer import templating
from tests.test_viewer import sign_in
from tests.viewer_helpers import SLUG, viewed_run

FIGURES = ("scorer", "located_recall", "chance", "precision")


def _cli(dsn: str, home: Path, run_id: uuid.UUID) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "props.tools.cli", "runs", "show", str(run_id), "--format",
         "json"], capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _viewer_data(seen: dict[str, Any]) -> dict[str, Any]:
    """What the viewer's run page was given to render, in the CLI's terms."""
    found, scores = seen["found"], seen["scores"] or {}
    return {"status": seen["run"]["status"], "scorer": found.scorer if found else None,
            # (the page is given the view's row: its `recall` is the located recall)
            **{k: scores.get("recall" if k == "located_recall" else k) for k in FIGURES[1:]},
            "issues": sorted(i.issue_id for i in found.issues) if found else [],
            "not_found": [t.label for t in found.missed] if found else []}


async def test_the_cli_the_api_and_the_viewer_show_one_run_page(
        store: EventStore, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graded = (await viewed_run(store)).run_id
    behind = uuid.uuid4()  # requested after the last fold: not projected yet
    await store.append(streams.run(behind), [catalog.RunRequested(
        run_id=behind, agent_type="critic", definition="viewer-critic",
        example=catalog.Example(snapshot=SLUG), model="model-a", timeout_seconds=60,
        budget_usd=1)])
    rendered: list[dict[str, Any]] = []
    render = templating.page  # (what the pages call)

    def capture(request: Any, template: str, status: int = 200, **context: Any) -> Any:
        rendered.append(context)
        return render(request, template, status, **context)

    monkeypatch.setattr(viewer_runs, "page", capture)
    _, secret = await tokens.create(store, "ada", ("read",))
    transport = httpx.ASGITransport(app=create_app(store))
    seen = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://props") as api, \
            httpx.AsyncClient(transport=transport, base_url="http://viewer") as viewer:
        assert (await sign_in(viewer, secret)).status_code == 303
        for run_id in (graded, behind):
            answer = await api.get(f"/api/runs/{run_id}",
                                   headers={"Authorization": f"Bearer {secret}"})
            assert answer.status_code == 200, answer.text
            page = await viewer.get(f"/runs/{run_id}")
            assert page.status_code == 200, page.text[:300]
            seen[run_id] = (_cli(dsn, tmp_path / "home", run_id), answer.json(),
                            _viewer_data(rendered[-1]), page.text)
    for run_id, (cli, from_api, from_viewer, _html) in seen.items():
        assert {k: from_api[k] for k in FIGURES} == {k: cli[k] for k in FIGURES}, run_id
        assert from_api["status"] == cli["status"] == from_viewer["status"], run_id
        assert from_viewer == {"status": cli["status"], **{k: cli[k] for k in FIGURES},
                               "issues": sorted(i["issue_id"] for i in cli["issues"]),
                               "not_found": cli["not_found"]}, run_id
    cli, from_api, _, html = seen[graded]
    assert cli["scorer"] == "tiered@2" and cli["located_recall"] is not None, (graded, from_api)
    assert cli["precision"] is not None and from_api["projected"]
    assert f"<span class=\"mono\">{cli['scorer']}</span>" in html
    cli, from_api, _, _ = seen[behind]
    assert cli["status"] == "requested" and cli["scorer"] is None and cli["located_recall"] is None
    assert not from_api["projected"]

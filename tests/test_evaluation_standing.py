"""One evaluation, one standing: `props eval show --format json`, the API's
`GET /api/evaluations/{name}` and the viewer's page say the same of each case and the same
counts, for an evaluation that ended with cases missing, one still running and one stopped
on errors (props.projections.evaluation_standing is the one place that computes it).

The negative control: before the read model, the API and the viewer read the cases without
asking whether the evaluation ended, so an ended evaluation's cases with no result were
shown waiting or running while `props eval show` said missing; the first assertion on the
ended evaluation fails on that code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from props.core.domain import catalog, definitions, evaluation_starts, evaluations, streams, tokens
from props.core.log.store import EventStore
from props.projections import engine
from props.reactors import evaluation_driver as driver
from props.tools.http.app import create_app
from tests.reactor_helpers import sync_samples
from tests.test_viewer import sign_in

DONE = {"scored", "excluded"}


async def _evaluation(store: EventStore, name: str) -> evaluations.Evaluation:
    """Four cases (a critic x two examples x two epochs): the first finished without an
    issue (scored), the second in flight, the other two never requested."""
    plan = evaluations.Plan(name=name, examples=["csvtool/*", "logparse/*"], epochs=2,
                            critic=[evaluations.Critic(definition="reference", ref="local")])
    ev, _ = await evaluation_starts.start(store, plan, await evaluations.resolve(store, plan))
    assert len(ev.cases) == 4
    done = await evaluations.request(store, ev, ev.cases[0], 0)
    await store.append(streams.run(done), [catalog.RunFinished(
        run_id=done, status="completed", cost_usd=0.25)])
    await evaluations.request(store, ev, ev.cases[1], 0)
    return ev


async def _failed(store: EventStore, ev: evaluations.Evaluation) -> None:
    run = await evaluations.request(store, ev, ev.cases[2], 0)
    await store.append(streams.run(run), [catalog.RunFinished(
        run_id=run, status="failed", failure=catalog.Failure(
            phase="run", category="exit_nonzero", retryable=True, exit_code=3))])


def _cli(dsn: str, home: Path, name: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "props.tools.cli", "eval", "show", name, "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PROPS_DSN": dsn, "PROPS_HOME": str(home)})
    assert done.returncode == 3, done.stdout + done.stderr  # none of them is complete
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _page(html: str) -> tuple[dict[str, int], dict[str, str], str]:
    """What the viewer's page shows: the counts, each case not done with its state, and
    the evaluation's status."""
    counts = {k: int(n.replace(",", "")) for k, n in re.findall(
        r'<div data-count="(\w+)"><dt>\w+</dt><dd>([\d,]+)</dd>', html)}
    cases = dict(re.findall(r'<tr data-case="([^"]+)"><td>(\w+)</td>', html))
    status = re.search(r'<span class="status [\w-]+">([^<]+)</span>', html)
    assert status, html[:500]
    return counts, cases, status[1]


async def test_the_cli_the_api_and_the_viewer_show_one_standing(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    ended = await _evaluation(store, "ended")
    await driver.end_drive(store, ended, "complete")  # (recorded as incomplete)
    await _evaluation(store, "running")
    failed = await _evaluation(store, "failed")
    await _failed(store, failed)
    await driver.end_drive(store, failed, "stopped_on_errors")
    await engine.rebuild(store)
    _, secret = await tokens.create(store, "ada", ("read",))
    transport = httpx.ASGITransport(app=create_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://props") as api, \
            httpx.AsyncClient(transport=transport, base_url="http://viewer") as viewer:
        assert (await sign_in(viewer, secret)).status_code == 303
        seen = {}
        for name in ("ended", "running", "failed"):
            answer = await api.get(f"/api/evaluations/{name}",
                                   headers={"Authorization": f"Bearer {secret}"})
            assert answer.status_code == 200, answer.text
            page = await viewer.get(f"/evaluations/{name}")
            assert page.status_code == 200, page.text[:300]
            seen[name] = (_cli(dsn, tmp_path / "home", name), answer.json(), page.text)
    for name, (cli, from_api, html) in seen.items():
        states = {c["key"]: c["state"] for c in cli["cases"]}
        assert {c["key"]: c["state"] for c in from_api["cases"]} == states, name
        assert from_api == cli, name  # the whole standing, figures and outcome too
        counts, open_cases, _status = _page(html)
        assert counts == cli["counts"], name
        assert open_cases == {k: s for k, s in states.items() if s not in DONE}, name
    cli, _, html = seen["ended"]
    assert [c["state"] for c in cli["cases"]] == ["scored", "missing", "missing", "missing"]
    assert cli["ended"] and cli["outcome"] == "incomplete"
    assert _page(html)[2] == "ended: incomplete"
    cli, _, html = seen["running"]
    assert [c["state"] for c in cli["cases"]] == ["scored", "running", "waiting", "waiting"]
    assert not cli["ended"] and cli["outcome"] == "incomplete"
    assert _page(html)[2] == "not complete"
    cli, _, html = seen["failed"]
    assert [c["state"] for c in cli["cases"]] == ["scored", "missing", "failed", "missing"]
    assert cli["ended"] and cli["outcome"] == "stopped_on_errors"
    assert cli["counts"] == {"scored": 1, "missing": 2, "failed": 1}
    assert _page(html)[2] == "ended: stopped on errors"

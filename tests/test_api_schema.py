"""The API's OpenAPI document is the truth: schemathesis, a client nobody here wrote, sends
every operation valid and invalid requests (`-c all`) and checks every answer against the
document the running server publishes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from props.core.log.store import EventStore
from props.tools.http import app as http_app
from tests.conftest import once_per_ci
from tests.reactor_helpers import sync_samples
from tests.test_api import _ready, props_serve

pytestmark = once_per_ci  # what it checks does not depend on the server's kind

SCHEMATHESIS = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")


def _schemathesis(schema: Path, url: str, token: str,
                  *more: str) -> subprocess.CompletedProcess[str]:
    # A fixed seed: CI asks the same questions each time (a failure is reproducible with it).
    # Run in the document's folder: schemathesis keeps its cache (.schemathesis/) in the cwd.
    # Bounded by its number of cases (--max-examples), not by a clock: on a loaded machine
    # the same cases only take longer (the test's own limit below is a guard against a hang).
    return subprocess.run(
        [SCHEMATHESIS, "run", str(schema), "--url", url, "-H", f"Authorization: Bearer {token}",
         "-c", "all", "--max-examples", "40", "--seed", "20261202", "--no-color", *more],
        capture_output=True, text=True, cwd=schema.parent)


def test_every_refusal_a_route_declares_has_the_problem_body() -> None:
    """A status a route declares itself replaces the app's entry whole: without a body
    schema, schemathesis holds the route's JSON refusal to a document that says nothing
    (POST /api/evaluations declared 409 and 429 so). Control: a bare entry is found."""
    document = http_app.create_app(None).openapi()  # type: ignore[arg-type]
    assert _bare(document) == []
    document["paths"]["/api/evaluations"]["post"]["responses"]["409"].pop("content")
    assert _bare(document) == ["POST /api/evaluations 409"]


def _bare(document: dict[str, Any]) -> list[str]:
    return [f"{method.upper()} {path} {status}"
            for path, operations in document["paths"].items()
            for method, operation in operations.items()
            for status, answer in operation["responses"].items()
            if not status.startswith("2") and "content" not in answer]


@pytest.mark.timeout(3600)  # a hang guard: the run is bounded by its cases, not by time
@pytest.mark.slow
async def test_schemathesis_finds_nothing_the_schema_does_not_say(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    if not Path(SCHEMATHESIS).exists():
        pytest.fail("schemathesis is not installed (it is a dev dependency)")
    await sync_samples(store)
    await _ready(store)
    async with props_serve(dsn, tmp_path, "--runtime", "local") as served:
        async with served.client(served.admin) as api:
            document = (await api.get("/openapi.json")).json()
        published = tmp_path / "openapi.json"
        published.write_bytes(orjson.dumps(document))
        checked = _schemathesis(published, served.url, served.admin)
        assert checked.returncode == 0, checked.stdout[-6000:]
        assert "passed" in checked.stdout and "generated" in checked.stdout

        # Negative control: the same server against a document that forgets 401 and 404.
        # schemathesis must call them undocumented, or the run above proved nothing.
        for operations in document["paths"].values():
            for operation in operations.values():
                for status in ("401", "404"):
                    operation.get("responses", {}).pop(status, None)
        forgetful = tmp_path / "forgetful.json"
        forgetful.write_bytes(orjson.dumps(document))
        # It stops at the first failure: that one is the finding the control needs.
        caught = _schemathesis(forgetful, served.url, served.admin, "--max-failures", "1")
        assert caught.returncode != 0 and "Undocumented status code" in caught.stdout, \
            caught.stdout[-3000:]


@pytest.mark.slow
async def test_get_on_the_request_route_is_405_not_a_run_id(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await _ready(store)
    async with props_serve(dsn, tmp_path, "--runtime", "local") as served, \
            served.client(served.admin) as api:
        answer = await api.get("/api/runs/critic")
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        assert (await api.post("/api/runs/critic", json={
            "definition": "nope", "snapshot": "csvtool/2025-09-03-00",
            "model": "m"})).status_code == 404

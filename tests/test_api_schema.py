"""The API's OpenAPI document is the truth: schemathesis, a client nobody here wrote, sends
every operation valid and invalid requests (`-c all`) and checks every answer against the
document the running server publishes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from props.core.log.store import EventStore
from tests.reactor_helpers import sync_samples
from tests.test_api import _ready, props_serve

pytestmark = [pytest.mark.slow]

SCHEMATHESIS = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")


def _schemathesis(schema: Path, url: str, token: str) -> subprocess.CompletedProcess[str]:
    # A fixed seed: CI asks the same questions each time (a failure is reproducible with it).
    # Run in the document's folder: schemathesis keeps its cache (.schemathesis/) in the cwd.
    return subprocess.run(
        [SCHEMATHESIS, "run", str(schema), "--url", url, "-H", f"Authorization: Bearer {token}",
         "-c", "all", "--max-examples", "40", "--seed", "20261202", "--no-color"],
        capture_output=True, text=True, timeout=600, cwd=schema.parent)


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
        caught = _schemathesis(forgetful, served.url, served.admin)
        assert caught.returncode != 0 and "Undocumented status code" in caught.stdout, \
            caught.stdout[-3000:]


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

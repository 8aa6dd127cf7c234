"""Parsers cannot be driven into recursion: a JSON body or a TOML file nested 100,000 deep
is refused with the documented error, never a 500 or a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from props.core.log.store import EventStore
from props.tools.http import app as http_app
from props.tools.http import limits

DEEP = 100_000


def test_nesting_is_counted_without_parsing() -> None:
    assert limits.nesting(b'{"a": [1, {"b": "[[[[ not counted: a string ]]]]"}]}') == 3
    assert limits.nesting(b'"\\"[[["') == 0  # an escaped quote does not end the string
    assert limits.nesting(b"[" * DEEP + b"]" * DEEP) == DEEP


async def test_a_deep_json_body_is_refused_before_any_route(store: EventStore) -> None:
    app = http_app.create_app(store)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://props") as client:
        deep = await client.post("/api/runs/critic", content=b"[" * DEEP + b"]" * DEEP,
                                 headers={"content-type": "application/json"})
        assert deep.status_code == 422, deep.text
        assert "nests" in deep.text
        # Negative control: a body within the bound reaches the route (which wants a token).
        shallow = await client.post("/api/runs/critic", content=b"[" * 10 + b"]" * 10,
                                    headers={"content-type": "application/json"})
        assert shallow.status_code == 401


def test_a_deep_ground_truth_is_a_problem_in_that_file(tmp_path: Path) -> None:
    snapshot = tmp_path / "deep" / "2026-12-01-00"
    (snapshot / "code").mkdir(parents=True)
    (snapshot / "code" / "a.py").write_text("x = 1\n")
    (snapshot / "ground_truth.toml").write_text("x = " + "[" * DEEP + "]" * DEEP + "\n")
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "validate",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          check=False, env=dict(os.environ))
    assert done.returncode == 65, done.stdout + done.stderr
    assert "nested too deeply" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr

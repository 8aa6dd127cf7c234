"""The how-to's critic image, built and run as its page says (docs/howto/write-a-critic.md).

Its Dockerfile is built with the real Docker from a slim Python base (made here from the
host's interpreter: no registry on a test machine, see tests/python_base.py), holding only
psycopg and the SDK file beside the example critic. It is pushed with `props definitions
push` and evaluated with `props eval run --runtime docker` on the csvtool sample: the case
ends scored, and every issue it reported is graded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio.to_thread
import pytest

from props.core.log.store import EventStore
from props.reactors.agents import sdk
from props.reactors.runtimes.docker_runtime import DockerRuntime
from tests import python_base
from tests.reactor_helpers import sync_samples

HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto" / "critic"
BASE_IMAGE = "props-howto-python:test"
CRITIC_IMAGE = "props-howto-critic:test"
CLI = [sys.executable, "-m", "props.tools.cli"]


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **(env or {})})


def _build(context: Path) -> subprocess.CompletedProcess[str]:
    """The page's steps: copy the SDK beside the Dockerfile, `docker build`."""
    shutil.copytree(HOWTO, context)
    shutil.copy(sdk.__file__, context / "props_agent.py")
    return _run(["docker", "build", "--build-arg", f"BASE={BASE_IMAGE}", "-t", CRITIC_IMAGE,
                 str(context)], {"DOCKER_BUILDKIT": "0"})


@pytest.mark.docker
@pytest.mark.slow
async def test_the_howto_critic_image_builds_runs_and_is_graded(
        store: EventStore, dsn: str, docker: DockerRuntime, tmp_path: Path) -> None:
    """(`docker`: an engine, or the test is skipped: it is built and run with the CLI.)"""
    wheels = await anyio.to_thread.run_sync(python_base.psycopg_wheels, tmp_path / "wheels")
    rootfs = tmp_path / "base.tar"
    rootfs.write_bytes(await anyio.to_thread.run_sync(python_base.rootfs, wheels))
    try:
        imported = await anyio.to_thread.run_sync(_run, ["docker", "import", str(rootfs),
                                                         BASE_IMAGE])
        assert imported.returncode == 0, imported.stderr
        built = await anyio.to_thread.run_sync(_build, tmp_path / "context")
        assert built.returncode == 0, built.stdout + built.stderr
        # What the image holds beside the base: psycopg (and its typing_extensions), no props.
        listed = await anyio.to_thread.run_sync(_run, [
            "docker", "run", "--rm", "--network", "none", CRITIC_IMAGE, "python", "-m", "pip",
            "list", "--format", "freeze", "--exclude", "pip"])
        assert {line.split("==")[0] for line in listed.stdout.split()} == {
            "psycopg", "psycopg-binary", "typing_extensions"}, listed.stdout
        await sync_samples(store)
        env = {"PROPS_DSN": dsn, "PROPS_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
        pushed = _run([*CLI, "definitions", "push", "--type", "critic", "--name", "howto",
                       "--image", CRITIC_IMAGE], env)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        plan = tmp_path / "plan.toml"
        plan.write_text('name = "howto"\nexamples = ["csvtool/*"]\n'
                        '[[critic]]\ndefinition = "howto"\n')
        done = await anyio.to_thread.run_sync(
            _run, [*CLI, "eval", "run", str(plan), "--runtime", "docker"], env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "howto: complete: 1 scored" in done.stdout, done.stdout
    finally:
        _run(["docker", "rmi", "-f", CRITIC_IMAGE, BASE_IMAGE])
    # From the log: every issue the critic reported has its grade.
    issues = await store.pool.fetch(
        "SELECT data->>'run_id', data->>'issue_id' FROM props.events "
        "WHERE type = 'issue.reported'")
    grades = await store.pool.fetch(
        "SELECT data->>'critique_run_id', data->>'critique_issue_id', data->>'tp_id' "
        "FROM props.events WHERE type = 'grade.emitted' UNION ALL "
        "SELECT data->>'critique_run_id', g->>'issue_id', g->>'tp_id' FROM props.events, "
        "jsonb_array_elements(data->'grades') g WHERE type = 'grades.emitted'")
    assert len(issues) >= 2
    assert sorted((r[0], r[1]) for r in issues) == sorted((r[0], r[1]) for r in grades)
    # The example's two checks find the sample's leaked file handle and dropped values.
    assert {"file-handle-leak", "unparsable-values-dropped"} <= {r[2] for r in grades}

"""`props runs logs RUN [--tail N]`: a failed critic says why from the CLI (issue 55).

A critic written against an older SDK exits 1, and `props runs show` gave `exit_nonzero` and a
`logs_sha256` that no command printed. Now `runs logs` prints the stored output, for any
runtime (local processes and Docker here), as text: `[b]` and a closing tag with no opener
are printed as they are (through rich, the second raised), an ESC is shown as `\\x1b`; and
`runs show` of a failed run points at it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from props.core.domain import catalog, definitions
from props.core.log.store import EventStore
from props.reactors.runtimes import docker_runtime
from props.reactors.runtimes.container_runtime import ContainerRuntime
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.conftest import docker_or_skip
from tests.reactor_helpers import finished, push_code, request, serving, sync_samples
from tests.test_cli import props

SAYS = ("import sys\n"
        "for i in range(5): print(f'line {i}')\n"
        "print('[bold]not markup[/bold] [/oops]')\n"
        "print('\\x1b[31mred\\x1b[0m', file=sys.stderr)\n"
        "print('the SDK is too old: Agent.report() takes 2 arguments', file=sys.stderr)\n"
        "sys.stdout.flush(); sys.exit(3)\n")

LINES = ["line 0", "line 1", "line 2", "line 3", "line 4",
         "[bold]not markup[/bold] [/oops]", "\\x1b[31mred\\x1b[0m",
         "the SDK is too old: Agent.report() takes 2 arguments"]


async def _failed_run(store: EventStore, runtimes: list[ContainerRuntime]) -> str:
    [run_id] = await request(store, "says-why")
    async with serving(store, runtimes):
        done = (await finished(store, [run_id]))[run_id]
    assert done.status == "failed" and done.failure is not None
    assert done.failure.category == "exit_nonzero"
    return str(run_id)


def _check(dsn: str, run_id: str) -> None:
    out = props("runs", "logs", run_id[:8], dsn=dsn)
    assert out.returncode == 0, out.stderr
    # stdout and stderr come back in one blob: each stream's lines in their order.
    got = out.stdout.splitlines()
    assert sorted(got) == sorted(LINES), got
    assert [g for g in got if g.startswith("line")] == LINES[:5]
    tail = props("runs", "logs", run_id, "--tail", "2", dsn=dsn)
    assert tail.returncode == 0 and tail.stdout.splitlines() == got[-2:]
    shown = props("runs", "show", run_id, dsn=dsn, env={"COLUMNS": "200"})
    assert f"its container's output: props runs logs {run_id[:8]}" in shown.stdout


async def test_a_failed_local_run_s_output_is_printed_as_text(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await sync_samples(store)
    await push_code(store, "says-why", SAYS)
    run_id = await _failed_run(store, [LocalRuntime(tmp_path / "c", trust_commands=True)])
    _check(dsn, run_id)
    # The controls: a run no container has run yet has no output (66, one line), and a
    # bad --tail is refused by the parser (2).
    [waiting] = await request(store, "says-why")
    none = props("runs", "logs", str(waiting), dsn=dsn)
    assert none.returncode == 66 and none.stderr.count("\n") == 1, none.stderr
    assert "none of its containers has exited" in none.stderr
    assert props("runs", "logs", str(waiting), "--tail", "0", dsn=dsn).returncode == 2
    # A run that has not failed is not pointed at.
    shown = props("runs", "show", str(waiting), dsn=dsn, env={"COLUMNS": "200"})
    assert "props runs logs" not in shown.stdout


@pytest.mark.docker
async def test_a_failed_docker_run_s_output_is_printed_as_text(
        store: EventStore, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "home"))
    await sync_samples(store)
    async with docker_or_skip() as docker:
        reference = await docker_runtime.build_reference_image(docker)
        python = reference.command[0] if reference.command else sys.executable
        await definitions.push(store, catalog.DefinitionPushed(**{
            **reference.model_dump(), "name": "says-why", "command": [python, "-c", SAYS]}))
        run_id = await _failed_run(store, [docker])
    _check(dsn, run_id)

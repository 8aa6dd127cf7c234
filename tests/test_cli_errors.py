"""How the command line ends when something expected goes wrong: one line on stderr, the
documented exit code, no traceback; and the few things every command takes."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from props.core.domain import catalog, definitions
from props.core.log import database
from props.core.log.store import EventStore
from props.projections import engine
from props.reactors import host
from props.reactors.runtimes.local_runtime import LocalRuntime
from tests.reactor_helpers import SNAPSHOT, eventually, serving, sync_samples
from tests.test_cli import CLI, props


@pytest.mark.parametrize(("args", "dsn_of", "code", "says"), [
    (["runs", "list"], "migrated", 65, "props projections rebuild --all"),
    (["runs", "list", "--bogus"], "migrated", 2, "usage: props runs list"),
    (["export", "-o", "/missing/dir/x.zst"], "migrated", 78, "no folder /missing/dir"),
    (["runs", "list"], "unknown role", 78, "refused the login"),
    (["runs", "list"], "not a dsn", 78, "not a PostgreSQL connection string"),
    (["report", "--as-of", "[/x]"], "migrated", 65, "props projections rebuild --all"),
])
def test_expected_failures_say_one_line_and_exit_with_their_code(
        args: list[str], dsn_of: str, code: int, says: str, dsn: str) -> None:
    target = {"migrated": dsn,
              "unknown role": database.with_user(dsn, "props_nobody"),
              "not a dsn": dsn.replace("/props_", ":notaport/props_", 1)}[dsn_of]
    out = props(*args, dsn=target)
    assert out.returncode == code, (args, out.stderr)
    assert says in out.stderr and "Traceback" not in out.stderr, out.stderr
    if code != 2:  # (argparse's usage errors print the usage first)
        assert len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stdout == ""


def test_a_closed_pipe_ends_the_command_quietly(dsn: str) -> None:
    shell = subprocess.run(
        f"{' '.join(CLI)} events types | head -1; echo \"${{PIPESTATUS[0]}}\"",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
        env={"PROPS_DSN": dsn, "PATH": "/usr/bin:/bin"}, check=False)
    lines = shell.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "141", shell.stdout
    assert shell.stderr == "", shell.stderr


def test_version_and_verbose_anywhere(dsn: str) -> None:
    version = props("--version", dsn=dsn)
    assert version.returncode == 0 and version.stdout.startswith("props ")
    for args in (["-v", "projections", "status"], ["projections", "status", "-v"]):
        out = props(*args, dsn=dsn)
        assert out.returncode == 0, (args, out.stderr)
        assert "using PostgreSQL at" in out.stderr, (args, out.stderr)  # what it does
    assert "using PostgreSQL" not in props("projections", "status", dsn=dsn).stderr


def test_every_command_and_option_says_what_it_is() -> None:
    import argparse

    from props.tools.cli import build_parser

    silent: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        if not parser.description:
            silent.append(f"{path}: no description")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif not action.help and action.dest != "help":
                silent.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "props")
    assert silent == []


@pytest.mark.parametrize(("args", "says"), [
    (["runs", "list", "--limit", "-1"], "-1 is not 1 or more"),
    (["runs", "list", "--status", "complete"], "invalid choice: 'complete'"),
    (["runs", "request", "--definition", "d", "--snapshot", "s", "--model", "m",
      "--count", "0"], "0 is not 1 or more"),
])
def test_invalid_filters_are_usage_errors(args: list[str], says: str, dsn: str) -> None:
    out = props(*args, dsn=dsn)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert f"usage: props {args[0]} {args[1]}" in out.stderr


def test_names_that_are_not_in_the_log_exit_66(dsn: str) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    for args in (["runs", "show", missing], ["runs", "release", missing],
                 ["runs", "hold", missing, "--reason", "r"], ["tokens", "revoke", "nobody"],
                 ["specimens", "show", "nothing/2026-01-01-00"]):
        out = props(*args, dsn=dsn)
        assert out.returncode == 66, (args, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1


async def test_runs_request_says_whether_a_launcher_will_take_it_up(
        store: EventStore, dsn: str, tmp_path: Path) -> None:
    await sync_samples(store)
    await definitions.push(store, definitions.reference_local())
    ask = ["runs", "request", "--definition", "reference", "--snapshot", SNAPSHOT,
           "--model", "m", "--budget", "0"]
    alone = props(*ask, dsn=dsn)
    assert alone.returncode == 0 and "no launcher is running" in alone.stdout, alone.stderr
    async with serving(store, [LocalRuntime(tmp_path / "containers", trust_commands=True)]):
        await eventually(lambda: host.serving(store, "launcher"), 30)
        # In a thread: the reactors serving in this event loop must not stall meanwhile.
        served = await anyio.to_thread.run_sync(lambda: props(*ask, dsn=dsn))
    assert served.returncode == 0 and "a launcher is running" in served.stdout, served.stderr


async def test_runs_list_says_when_it_is_empty_and_when_the_projections_lag(
        store: EventStore, dsn: str) -> None:
    await engine.rebuild(store)
    empty = props("runs", "list", "--status", "failed", dsn=dsn)
    assert empty.returncode == 0 and empty.stdout.strip() == "no runs in status failed"
    assert empty.stderr == ""  # caught up: no warning
    run = uuid.uuid4()
    await store.append(f"run-{run}", [catalog.RunRequested(
        run_id=run, agent_type="critic", definition="d", example=catalog.Example(
            snapshot=SNAPSHOT), model="m", timeout_seconds=60, budget_usd=0)])
    late = props("runs", "list", dsn=dsn)
    assert late.returncode == 0 and "1 event(s)" in late.stderr and "behind" in late.stderr


def test_serve_gives_up_on_a_database_it_never_reached(dsn: str, tmp_path: Path) -> None:
    closed = "postgresql://postgres@127.0.0.1:1/nowhere"  # nothing listens on port 1
    out = props("serve", "--only", "grader", "--connect-wait", "1", dsn=closed,
                env={"PROPS_HOME": str(tmp_path)})
    assert out.returncode == 69, out.stderr
    errors_said = [line for line in out.stderr.splitlines() if line.startswith("props:")]
    assert len(errors_said) == 1 and "gave up waiting for the database" in errors_said[0]
    assert "Traceback" not in out.stderr and "ExceptionGroup" not in out.stderr
    refused = props("serve", "--only", "grader", dsn=database.with_user(dsn, "props_nobody"),
                    env={"PROPS_HOME": str(tmp_path)})
    assert refused.returncode == 78 and "refused the login" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and "ExceptionGroup" not in refused.stderr


async def test_run_ids_are_shown_short_and_taken_by_unique_prefix(store: EventStore,
                                                                  dsn: str) -> None:
    one, two = (uuid.UUID(f"abcd{n}000-0000-4000-8000-000000000000") for n in (1, 2))
    for run in (one, two):
        await store.append(f"run-{run}", [catalog.RunRequested(
            run_id=run, agent_type="critic", definition="d", example=catalog.Example(
                snapshot=SNAPSHOT), model="m", timeout_seconds=60, budget_usd=0)])
    await engine.rebuild(store)
    listed = props("runs", "list", dsn=dsn, env={"COLUMNS": "80"}).stdout
    assert "abcd1000 " in listed and str(one) not in listed  # 8 digits in the table
    assert str(one) in props("runs", "list", "--json", dsn=dsn).stdout  # whole in JSON
    shown = props("runs", "show", "abcd1", dsn=dsn)
    assert shown.returncode == 0 and "run.requested" in shown.stdout, shown.stderr
    both = props("runs", "show", "abcd", dsn=dsn)
    assert both.returncode == 65 and str(one) in both.stderr and str(two) in both.stderr
    assert props("runs", "show", "abcd9", dsn=dsn).returncode == 66
    assert props("runs", "show", "xyz!", dsn=dsn).returncode == 2
    short = props("runs", "show", "ab", dsn=dsn)  # a prefix, but too short to name one
    assert short.returncode == 2 and "give at least 4 hex digits" in short.stderr
    held = props("runs", "hold", "abcd2", "--reason", "audit", dsn=dsn)
    assert held.returncode == 0 and str(two) in held.stdout



def test_ctrl_c_while_a_command_loads_says_one_line_and_exits_130() -> None:
    """Ctrl-C while the command is still loading (its parser, its handler's imports: the
    KeyboardInterrupt comes from wherever the import was, `typing`, `pydantic`, ...): one
    line and 130, as once it runs, never a traceback. The interrupt is raised where the
    handler's module is imported, so the test does not depend on a signal's timing."""
    import sys

    probe = ("import sys\nfrom props.tools import cli\n"
             "def interrupted(name):\n    raise KeyboardInterrupt\n"
             "cli.handler_of = interrupted\nsys.exit(cli.main(['events', 'tail']))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=False)
    assert (out.returncode, out.stderr.strip()) == (130, "props: interrupted")

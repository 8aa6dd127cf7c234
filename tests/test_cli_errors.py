"""How the command line ends when something expected goes wrong: one line on stderr, the
documented exit code, no traceback; and the few things every command takes."""

from __future__ import annotations

import subprocess

import pytest

from props.core import database
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
    assert len(out.stderr.splitlines()) <= 2, out.stderr  # the line (and argparse's usage)
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

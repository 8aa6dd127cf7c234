"""The embedded server: started on demand, shared by concurrent commands, stopped cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from props.core.log import embedded

CLI = [sys.executable, "-m", "props.tools.cli"]


@pytest.mark.slow
def test_commands_started_at_once_share_one_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROPS_DSN"}
    env["PROPS_HOME"] = str(tmp_path / "home")
    procs = [subprocess.Popen([*CLI, "db", "dsn"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, [o[1] for o in outs]
        dsns = {o[0].strip() for o in outs}
        assert len(dsns) == 1, dsns
        # The server outlives the commands, so `psql "$(props db dsn)"` works.
        with psycopg.connect(dsns.pop()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert embedded.is_running(tmp_path / "home")
        stop = subprocess.run([*CLI, "db", "stop"], env=env, capture_output=True, text=True,
                              timeout=120, check=False)
        assert stop.returncode == 0 and "stopped" in stop.stdout
        assert stop.stderr == "", stop.stderr  # (pgserver's exit hook printed a KeyError)
        assert not embedded.is_running(tmp_path / "home")
        again = subprocess.run([*CLI, "db", "stop"], env=env, capture_output=True, text=True,
                               timeout=120, check=False)
        assert "was not running" in again.stdout
    finally:
        embedded.stop(tmp_path / "home")


def test_default_home_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("PROPS_HOME", str(tmp_path / "h"))
    assert embedded.default_home() == tmp_path / "h"
    monkeypatch.delenv("PROPS_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert embedded.default_home() == tmp_path / "xdg" / "props"

"""Round trips a user relies on (issue 55): the demo's evaluation, exported, imported into an
empty PROPS_HOME, shows the same cases and figures, under the scorer that graded them.

Each path is a user's commands, as typed, in their own PROPS_HOME (an embedded server each):
`props export --eval demo`, the demo's own whole-log export, and a signed file imported with
`--trusted-keys`. On the code before, each import was refused: the empty database was not
migrated (65), then its scorer's activation acted on this database's consumers (65), and with
`--inert` the scorer's stream lost a version ("would not stay dense and ordered").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import once_per_ci
from tests.test_cli import CLI

# Every home here is an embedded server of its own, whatever PROPS_TEST_DSN names: a second
# pass on another server would run the very same commands again.
pytestmark = [pytest.mark.slow, once_per_ci]


def _home(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PROPS_DSN"}
    return {**env, "PROPS_HOME": str(home), "COLUMNS": "200"}


def _props(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=_home(home),
                          timeout=1800, check=False)


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Every PROPS_HOME the module makes: each one's embedded server is stopped at the end."""
    made: list[Path] = []
    yield made
    for home in made:
        _props(home, "db", "stop")


def _new_home(homes: list[Path], root: Path, name: str) -> Path:
    home = root / name
    homes.append(home)
    return home


@pytest.fixture(scope="module")
def demo(homes: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home where `props demo` ran (its evaluation `demo`, its export beside it)."""
    home = _new_home(homes, tmp_path_factory.mktemp("origin"), "home")
    out = _props(home, "demo")
    assert out.returncode == 0, out.stdout + out.stderr
    return home


def _shown(home: Path) -> dict[str, Any]:
    out = _props(home, "eval", "show", "demo", "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _active(home: Path) -> list[str]:
    """The scorers `props scorers list` calls active (the last column of its table)."""
    out = _props(home, "scorers", "list")
    assert out.returncode == 0, out.stderr
    return [line.split()[0] for line in out.stdout.splitlines()
            if line.rstrip().endswith(" active")]


SAME = ("name", "version", "outcome", "complete", "scorer", "counts", "critics", "cases")


def _imported_shows_the_same(demo: Path, target: Path, file: Path, *extra: str,
                             new: bool = True) -> None:
    """Import `file` into the empty `target`; its `eval show demo` is the origin's. `new`:
    nothing ran there yet (the import migrates the database)."""
    imported = _props(target, "import", str(file), *extra)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    from props.core.log import migrate

    applied = f"applied its {len(migrate.available())} migration(s) first"
    assert (applied in imported.stderr) == new, imported.stderr
    flat = " ".join(imported.stdout.split())
    assert "1 scorer.activated (in their streams)" in flat, flat
    assert "never change this database's active scorer, retries or holds" in flat
    assert "built the projections" in flat
    theirs, ours = _shown(demo), _shown(target)
    assert ours["counts"] == {"scored": 18}
    assert {k: ours[k] for k in SAME} == {k: theirs[k] for k in SAME}
    assert (theirs["scorer_from"], ours["scorer_from"]) == ("active", "origin")
    table = " ".join(_props(target, "eval", "show", "demo").stdout.split())
    assert "judged under the scorer its origin had active" in table
    # History, not this database's choice: nothing is active here until someone activates.
    assert _active(target) == [] and _active(demo) == ["tiered@2"]  # (the origin's: control)
    again = _props(target, "import", str(file), *extra)  # a second import changes nothing
    assert again.returncode == 0 and "imported 0," in again.stdout, again.stdout


def test_an_evaluation_export_round_trips(demo: Path, homes: list[Path],
                                          tmp_path: Path) -> None:
    out = tmp_path / "demo.jsonl.zst"
    exported = _props(demo, "export", "--eval", "demo", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    target = _new_home(homes, tmp_path, "empty")
    _imported_shows_the_same(demo, target, out)


def test_the_demo_s_whole_log_export_round_trips(demo: Path, homes: list[Path],
                                                 tmp_path: Path) -> None:
    """The demo's own export (the whole log: its launcher's records too, kept inert)."""
    target = _new_home(homes, tmp_path, "empty")
    _imported_shows_the_same(demo, target, demo / "demo-export.jsonl.zst")
    events = _props(target, "events", "tail", "--from", "start", "--no-follow")
    assert "import.inert" in events.stdout  # the origin's launcher.started, readable


def test_a_signed_export_round_trips_with_trusted_keys(demo: Path, homes: list[Path],
                                                       tmp_path: Path) -> None:
    assert _props(demo, "keys", "create", "lab").returncode == 0
    out = tmp_path / "signed.jsonl.zst"
    exported = _props(demo, "export", "--eval", "demo", "-o", str(out), "--sign", "lab")
    assert exported.returncode == 0, exported.stderr
    trusted, stranger = tmp_path / "trusted", tmp_path / "stranger"
    trusted.mkdir()
    shutil.copy(demo / "keys" / "lab.pub", trusted / "lab.pub")
    # The control: a file signed by a key this directory does not hold is refused whole.
    other = _new_home(homes, tmp_path, "other")
    assert _props(other, "keys", "create", "them").returncode == 0
    stranger.mkdir()
    shutil.copy(other / "keys" / "them.pub", stranger / "them.pub")
    target = _new_home(homes, tmp_path, "empty")
    refused = _props(target, "import", str(out), "--trusted-keys", str(stranger))
    assert refused.returncode == 65, refused.stderr
    said = refused.stderr.strip().splitlines()
    assert len(said) == 2 and "applied its" in said[0] and "props: error:" in said[1], said
    assert _props(target, "eval", "show", "demo").returncode == 66  # nothing was written
    _imported_shows_the_same(demo, target, out, "--trusted-keys", str(trusted), new=False)

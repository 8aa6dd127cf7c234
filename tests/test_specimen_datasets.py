"""Answer keys from bug datasets: a BugsInPy folder and a SWE-bench JSONL of three bugs each,
built here over a repository this test makes, give the TPs at the lines computed by hand;
a bug whose commit or repository is missing is skipped and reported, nothing of it written;
the made snapshots sync, and the reference critic and ruff run on them and are graded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from props.core.domain import specimens
from tests.test_specimens_from_fixes import Repo, lines

CLI = [sys.executable, "-m", "props.tools.cli"]


def _calc(root: Path) -> tuple[Repo, list[str]]:
    """calc/core.py of 10 lines and its test; a fix of line 3 that also adds a test, then a
    fix that deletes lines 7 and 8."""
    repo = Repo(root)
    core = lines(10, "x")
    repo.write("calc/core.py", core)
    repo.write("tests/test_core.py", ["def test_x():", "    assert 1"])
    repo.write(".github/workflows/ci.yml", ["on: push"])
    c0 = repo.commit("the code")
    core[2] = "x_3 = 0  # fixed"
    repo.write("calc/core.py", core)
    repo.write("tests/test_core.py", ["def test_x():", "    assert 1", "def test_3():",
                                      "    assert x_3 == 0"])
    c1 = repo.commit("Fix x_3, with a test\n\nSigned-off-by: t <t@example.org>")
    del core[6:8]
    repo.write("calc/core.py", core)
    c2 = repo.commit("Drop x_7 and x_8")
    return repo, [c0, c1, c2]


def _props(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "COLUMNS": "200", **(env or {})})


def _flat(text: str) -> str:
    """The output as one line, without the table's rules."""
    return " ".join(re.sub(r"[│┃┏┓┗┛━┳┻╇╈┡┩─┼└┘┌┐┬┴]", " ", text).split())


def _occurrences(out: Path) -> dict[str, list[tuple[str, list[list[int]]]]]:
    """Each made snapshot's TP occurrences, by the bug id in its header."""
    found = {}
    for s in specimens.load_valid(out):
        key = (out / s.slug / "ground_truth.toml").read_text()
        bug = key.split("from-dataset ")[1].split()[1]
        found[bug] = [(loc.file, [[r.start, r.end] for r in loc.ranges])
                      for tp in s.ground_truth.true_positives for occ in tp.occurrences
                      for loc in occ.locations]
    return found


def test_bugsinpy_gives_source_tps_and_skips_a_missing_commit(tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    _repo, (c0, c1, c2) = _calc(repos / "calc")
    dataset = tmp_path / "BugsInPy"
    for n, (buggy, fixed) in enumerate([(c0, c1), (c1, c2), (c1, "f" * 40)], 1):
        folder = dataset / "projects" / "calc" / "bugs" / str(n)
        folder.mkdir(parents=True)
        (folder / "bug.info").write_text(f'python_path="calc"\nbuggy_commit_id="{buggy}"\n'
                                         f'fixed_commit_id="{fixed}"\n'
                                         f'test_file="tests/test_core.py"\n')
    out = tmp_path / "out"
    made = _props("specimens", "from-dataset", "bugsinpy", str(dataset), "--repos",
                  str(repos), "-o", str(out))
    assert made.returncode == 3, made.stdout + made.stderr  # one was skipped
    flat = _flat(made.stdout)
    assert "bugsinpy: 2 written, 1 skipped" in flat
    assert f"calc-3 - commit {'f' * 12} is not in" in flat
    assert _occurrences(out) == {"calc-1": [("calc/core.py", [[3, 3]])],  # not the test
                                 "calc-2": [("calc/core.py", [[7, 8]])]}
    assert not any(".github" in str(p) for p in out.rglob("*"))
    again = _props("specimens", "from-dataset", "bugsinpy", str(dataset), "--repos",
                   str(repos), "-o", str(out), "--only", "calc-1")
    assert "written before, as calc/" in _flat(again.stdout)  # nothing twice
    assert len(list(out.glob("calc/*"))) == 2
    # Unreviewed: validate refuses the keys until a person has looked (or --allow-todo).
    assert _props("specimens", "validate", str(out)).returncode != 0
    assert _props("specimens", "validate", str(out), "--allow-todo").returncode == 0


@pytest.mark.slow
def test_swebench_tps_come_from_the_patch_never_the_test_patch(
        tmp_path: Path, dsn: str) -> None:
    repos = tmp_path / "repos"
    (repos / "acme").mkdir(parents=True)
    repo, (c0, c1, c2) = _calc(repos / "acme" / "calc")

    def diff(a: str, b: str, *paths: str) -> str:
        return repo.git("diff", a, b, "--", *paths) + "\n"

    rows = [{"instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": c0,
             "patch": diff(c0, c1, "calc"), "test_patch": diff(c0, c1, "tests"),
             "problem_statement": "x_3 is wrong"},
            {"instance_id": "acme__calc-2", "repo": "acme/calc", "base_commit": c1,
             "patch": diff(c1, c2, "calc"), "test_patch": "", "problem_statement": "stale"},
            {"instance_id": "gone__x-1", "repo": "gone/x", "base_commit": c0,
             "patch": "", "test_patch": "", "problem_statement": ""}]
    source = tmp_path / "swe.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    made = _props("specimens", "from-dataset", "swebench", str(source), "--repos", str(repos),
                  "-o", str(out))
    assert made.returncode == 3, made.stdout + made.stderr
    assert "gone__x-1 - no clone of its repository" in _flat(made.stdout)
    assert _occurrences(out) == {"acme__calc-1": [("calc/core.py", [[3, 3]])],
                                 "acme__calc-2": [("calc/core.py", [[7, 8]])]}
    keys = "".join(k.read_text() for k in out.glob("calc/*/ground_truth.toml"))
    assert "x_3 is wrong" in keys and keys.count("review it") == 2
    limited = _props("specimens", "from-dataset", "swebench", str(source), "--repos",
                     str(repos), "-o", str(tmp_path / "one"), "--limit", "1")
    assert limited.returncode == 0 and len(list((tmp_path / "one").glob("calc/*"))) == 1
    # The made snapshots sync, and the reference critic and ruff run on them: an evaluation.
    env = {"PROPS_DSN": dsn, "PROPS_HOME": str(tmp_path / "home")}
    assert _props("specimens", "sync", str(out), env=env).returncode == 0
    assert _props("definitions", "reference", env=env).returncode == 0
    assert _props("definitions", "baseline", "ruff", env=env).returncode == 0
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "swe"\nexamples = ["calc/*"]\n[[critic]]\n'
                    'definition = "reference"\nref = "local"\n'
                    '[[critic]]\ndefinition = "baseline-ruff"\n')
    ran = _props("eval", "run", str(plan), "--runtime", "local", env=env)
    assert ran.returncode == 0 and "swe: complete: 4 scored" in ran.stdout, \
        ran.stdout + ran.stderr


def test_a_fix_s_file_set_is_its_package_and_the_tests_that_import_it(tmp_path: Path) -> None:
    """Not every test of the project: those that import what the fix touched."""
    from props.core.domain import specimens_from_fixes

    snapshot = {"calc/core.py": "x = 1\n", "calc/util.py": "y = 2\n", "other/io.py": "z\n",
                "tests/test_core.py": "from calc.core import x\n",
                "tests/test_pkg.py": "from calc import core\n",
                "tests/test_io.py": "import other.io\n"}
    d = specimens_from_fixes.Defect("fix", "why", {"calc/core.py": [(1, 1)]}, [])
    key = specimens_from_fixes.ground_truth([d], snapshot, "a test")
    assert '"fix" = ["calc/core.py", "calc/util.py", "tests/test_core.py", ' \
           '"tests/test_pkg.py"]' in key  # not tests/test_io.py, nor other/


def test_a_hostile_dataset_writes_nothing_of_its_own(tmp_path: Path) -> None:
    """An id with a newline (it would end the key's header comment), a commit that is an
    option, a repo name climbing out of --repos, a rationale past the catalog's bound."""
    repos = tmp_path / "repos"
    (repos / "acme").mkdir(parents=True)
    repo, (c0, c1, _c2) = _calc(repos / "acme" / "calc")
    patch = repo.git("diff", c0, c1, "--", "calc") + "\n"
    rows = [{"instance_id": "x\n[[tp]]", "repo": "acme/calc", "base_commit": c0,
             "patch": patch},
            {"instance_id": "opt", "repo": "acme/calc", "base_commit": "--output=/tmp/x",
             "patch": patch},
            {"instance_id": "climb", "repo": "../repos/acme", "base_commit": c0,
             "patch": patch},
            {"instance_id": "essay", "repo": "acme/calc", "base_commit": c0, "patch": patch,
             "problem_statement": "word " * 10_000}]
    source = tmp_path / "swe.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    made = _props("specimens", "from-dataset", "swebench", str(source), "--repos", str(repos),
                  "-o", str(out))
    flat = _flat(made.stdout)
    assert made.returncode == 3 and "1 written, 3 skipped" in flat, made.stdout + made.stderr
    assert "its id is not a name props writes" in flat and "climb - no clone" in flat
    assert "opt - commit --output=/tm is not in" in flat  # never passed to git as an option
    key = next(out.glob("calc/*/ground_truth.toml")).read_text()
    assert "the rationale was cut to 20,000 characters" in key
    assert _props("specimens", "validate", str(out), "--allow-todo").returncode == 0

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

from props.core.domain.specimens import fix_keys, git_trees, specimen_datasets, specimens
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


def _jsonl(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    """A SWE-bench-style JSONL file of `rows`."""
    source = tmp_path / "swe.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return source


def _from_dataset(kind: str, given: Path, repos: Path, out: Path, *extra: str
                  ) -> subprocess.CompletedProcess[str]:
    return _props("specimens", "from-dataset", kind, str(given), "--repos", str(repos),
                  "-o", str(out), *extra)


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
    made = _from_dataset("bugsinpy", dataset, repos, out)
    assert made.returncode == 3, made.stdout + made.stderr  # one was skipped
    flat = _flat(made.stdout)
    assert "bugsinpy: 2 written, 1 skipped" in flat
    assert f"calc-3 - commit {'f' * 12} is not in" in flat
    assert _occurrences(out) == {"calc-1": [("calc/core.py", [[3, 3]])],  # not the test
                                 "calc-2": [("calc/core.py", [[7, 8]])]}
    assert not any(".github" in str(p) for p in out.rglob("*"))
    again = _from_dataset("bugsinpy", dataset, repos, out, "--only", "calc-1")
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
    source = _jsonl(tmp_path, rows)
    out = tmp_path / "out"
    made = _from_dataset("swebench", source, repos, out)
    assert made.returncode == 3, made.stdout + made.stderr
    assert "gone__x-1 - no clone of its repository" in _flat(made.stdout)
    assert _occurrences(out) == {"acme__calc-1": [("calc/core.py", [[3, 3]])],
                                 "acme__calc-2": [("calc/core.py", [[7, 8]])]}
    keys = "".join(k.read_text() for k in out.glob("calc/*/ground_truth.toml"))
    assert "x_3 is wrong" in keys and keys.count("review it") == 2
    limited = _from_dataset("swebench", source, repos, tmp_path / "one", "--limit", "1")
    assert limited.returncode == 0 and len(list((tmp_path / "one").glob("calc/*"))) == 1
    # The made snapshots sync, and the reference critic and ruff run on them: an evaluation.
    env = {"PROPS_DSN": dsn, "PROPS_HOME": str(tmp_path / "home")}
    refused = _props("specimens", "sync", str(out), env=env)  # unreviewed: as validate
    assert refused.returncode == 65 and "a TODO is left" in refused.stderr, refused.stderr
    assert _props("specimens", "list", env=env).stdout.count("calc/") == 0  # nothing recorded
    assert _props("specimens", "sync", str(out), "--allow-todo", env=env).returncode == 0
    assert _props("definitions", "reference", env=env).returncode == 0
    assert _props("definitions", "baseline", "ruff", "--local", env=env).returncode == 0
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "swe"\nexamples = ["calc/*"]\n[[critic]]\n'
                    'definition = "reference"\nref = "local"\n'
                    '[[critic]]\ndefinition = "baseline-ruff"\n')
    ran = _props("eval", "run", str(plan), "--runtime", "local", env=env)
    assert ran.returncode == 0 and "swe: complete: 4 scored" in ran.stdout, \
        ran.stdout + ran.stderr


def test_a_fix_s_file_set_is_its_package_and_the_tests_that_import_it(tmp_path: Path) -> None:
    """Not every test of the project: those that import the package of what the fix touched,
    in any form (tqdm's fix in tqdm/_tqdm.py is tested through `from tqdm import tqdm`)."""
    from props.core.domain.specimens import specimens_from_fixes

    snapshot = {"calc/__init__.py": "from calc.core import x\n", "calc/core.py": "x = 1\n",
                "calc/util.py": "y = 2\n", "other/io.py": "z\n",
                "tests/test_core.py": "from calc.core import x\n",
                "tests/test_pkg.py": "from calc import core\n",
                "tests/test_reexport.py": "from calc import x\n",
                "tests/test_plain.py": "import os, calc as c\n",
                "tests/test_io.py": "import other.io\nfrom calculator import calc\n"}
    d = specimens_from_fixes.Defect("fix", "why", {"calc/core.py": [(1, 1)]}, [])
    key = fix_keys.ground_truth([d], snapshot, "a test")
    assert '"fix" = ["calc/__init__.py", "calc/core.py", "calc/util.py", "tests/test_core.py", '\
           '"tests/test_pkg.py", "tests/test_plain.py", "tests/test_reexport.py"]' in key
    # (not tests/test_io.py: `calculator` and `other` are other packages, nor other/)


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
    source = _jsonl(tmp_path, rows)
    out = tmp_path / "out"
    made = _from_dataset("swebench", source, repos, out)
    flat = _flat(made.stdout)
    assert made.returncode == 3 and "1 written, 3 skipped" in flat, made.stdout + made.stderr
    assert "its id is not a name props writes" in flat and "climb - no clone" in flat
    assert "opt - commit --output=/tm is not in" in flat  # never passed to git as an option
    key = next(out.glob("calc/*/ground_truth.toml")).read_text()
    assert "the rationale was cut to 20,000 characters" in key
    assert _props("specimens", "validate", str(out), "--allow-todo").returncode == 0


def _bugsinpy(dataset: Path, name: str, n: int, buggy: str, fixed: str,
              patch: str | None, test_file: str = "tests/test_core.py") -> None:
    folder = dataset / "projects" / name / "bugs" / str(n)
    folder.mkdir(parents=True)
    (folder / "bug.info").write_text(f'buggy_commit_id="{buggy}"\nfixed_commit_id="{fixed}"\n'
                                     f'test_file="{test_file}"\n')
    if patch is not None:
        (folder / "bug_patch.txt").write_text(patch)


def _release(root: Path) -> tuple[Repo, str, str, str]:
    """PySnooper-2's shape: buggy..fixed spans three commits; the dataset's patch is the one
    fix of calc/core.py line 3. The others bring an unrelated change of line 9, a version
    bump, AUTHORS, MANIFEST.in, tox.ini and a whitespace-only change of line 5."""
    repo = Repo(root)
    core = lines(10, "x")
    repo.write("calc/__init__.py", ["__version__ = '0.1'"])
    repo.write("calc/core.py", core)
    for path in ("AUTHORS", "MANIFEST.in", "tox.ini"):
        repo.write(path, ["one"])
    repo.write("tests/test_core.py", ["from calc import core"])
    repo.write("tests/test_other.py", ["import os"])
    buggy = repo.commit("the code")
    core[2] = "x_3 = 0  # fixed"
    repo.write("calc/core.py", core)
    fix = repo.commit("Fix x_3")
    patch = repo.git("diff", buggy, fix, "--", "calc") + "\n"
    core[8] = "x_9 = 9  # another change"
    core[4] = "x_5  =  5"
    repo.write("calc/core.py", core)
    repo.write("calc/__init__.py", ["__version__ = '0.2'"])
    for path in ("AUTHORS", "MANIFEST.in", "tox.ini"):
        repo.write(path, ["one", "two"])
    repo.commit("Release 0.2")
    repo.write("tests/test_core.py", ["from calc import core", "def test_3(): ..."])
    fixed = repo.commit("Test x_3")
    return repo, buggy, fixed, patch


def _key_of(out: Path) -> str:
    [key] = out.glob("calc/*/ground_truth.toml")
    return key.read_text()


def test_bugsinpy_keys_are_the_dataset_s_patch_and_a_range_of_commits_is_listed(
        tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    _repo, buggy, fixed, patch = _release(repos / "calc")
    dataset = tmp_path / "BugsInPy"
    _bugsinpy(dataset, "calc", 1, buggy, fixed, patch)
    _bugsinpy(tmp_path / "bare", "calc", 1, buggy, fixed, None)  # the control: no patch
    out = tmp_path / "out"
    made = _from_dataset("bugsinpy", dataset, repos, out)
    assert made.returncode == 0, made.stdout + made.stderr
    assert _occurrences(out) == {"calc-1": [("calc/core.py", [[3, 3]])]}  # the patch's line
    key = _key_of(out)
    assert "(its bug_patch.txt)" in key and "buggy..fixed spans 3 commits (" in key
    assert all(s in key for s in ("Fix x_3", "Release 0.2", "Test x_3"))  # each listed
    # The file set: the package and its test (`from calc import core`), the dataset's test
    # file; not the test that imports nothing of it.
    assert '"calc/__init__.py", "calc/core.py", "tests/test_core.py"]' in key
    # Negative control: without bug_patch.txt the key is the whole range's diff, the other
    # change of line 9 too; packaging, the version bump and the spacing are notes, not lines.
    without = tmp_path / "without"
    assert _from_dataset("bugsinpy", tmp_path / "bare", repos, without).returncode == 0
    assert _occurrences(without) == {"calc-1": [("calc/core.py", [[3, 3], [9, 9]])]}
    key = _key_of(without)
    assert "(the diff to its fixed commit)" in key and "no bug_patch.txt" in key
    for path in ("AUTHORS", "MANIFEST.in", "tox.ini"):
        assert f'# note: the fix also changes "{path}" at [[1, 1]] (tests, docs' in key
    assert '"calc/__init__.py" at [[1, 1]] (only a version line' in key
    assert '"calc/core.py" at [[5, 5]] (only spacing changes' in key
    assert re.search(r'# TODO: "calc/core.py": the fix changes only spacing at \[\[5, 5\]\]',
                     key)


def test_a_single_commit_bug_has_no_range_todo(tmp_path: Path) -> None:
    """The control of the range TODO: one commit between buggy and fixed lists nothing."""
    repos = tmp_path / "repos"
    repos.mkdir()
    _repo, (c0, c1, _c2) = _calc(repos / "calc")
    dataset = tmp_path / "BugsInPy"
    _bugsinpy(dataset, "calc", 1, c0, c1, None)
    out = tmp_path / "out"
    assert _from_dataset("bugsinpy", dataset, repos, out).returncode == 0
    assert "spans" not in _key_of(out)


def test_swebench_finds_the_clone_at_dir_name_not_the_package_folder_inside_it(
        tmp_path: Path) -> None:
    """The clone at DIR/NAME; DIR/OWNER/NAME exists too, as the clone's own package folder
    (tqdm/tqdm): it is no clone, and git run in it answers for the clone around it."""
    repos = tmp_path / "repos"
    repos.mkdir()
    repo, (c0, c1, _c2) = _calc(repos / "calc")
    rows = [{"instance_id": "calc__calc-1", "repo": "calc/calc", "base_commit": c0,
             "patch": repo.git("diff", c0, c1, "--", "calc") + "\n"}]
    source = _jsonl(tmp_path, rows)
    out = tmp_path / "out"
    made = _from_dataset("swebench", source, repos, out)
    assert made.returncode == 0, made.stdout + made.stderr
    assert _occurrences(out) == {"calc__calc-1": [("calc/core.py", [[3, 3]])]}
    # Negative control: the old rule took the first folder that exists, DIR/OWNER/NAME.
    assert (repos / "calc" / "calc").is_dir()
    assert git_trees.top_level(repos / "calc" / "calc") is None
    assert git_trees.top_level(repos / "calc") == repos / "calc"


def test_a_clone_s_own_config_runs_nothing(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """core.fsmonitor is a program git runs when it refreshes an index (SWE-bench's patch is
    applied in one): a clone's config must never name what props runs."""
    repos = tmp_path / "repos"
    repos.mkdir()
    repo, (c0, c1, _c2) = _calc(repos / "calc")
    marker = tmp_path / "ran"
    hook = tmp_path / "monitor.sh"
    hook.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    hook.chmod(0o755)
    repo.git("config", "core.fsmonitor", str(hook))
    rows = [{"instance_id": "calc-1", "repo": "acme/calc", "base_commit": c0,
             "patch": repo.git("diff", c0, c1, "--", "calc") + "\n"}]
    source = _jsonl(tmp_path, rows)
    dataset = tmp_path / "BugsInPy"
    _bugsinpy(dataset, "calc", 1, c0, c1, rows[0]["patch"])
    for kind, given in (("swebench", source), ("bugsinpy", dataset)):
        made = _from_dataset(kind, given, repos, tmp_path / kind)
        assert made.returncode == 0, made.stdout + made.stderr
    assert not marker.exists()
    # Negative control: the same application of the patch, without the safe config, runs it.
    monkeypatch.setattr(git_trees, "SAFE_CONFIG", ())
    specimen_datasets._applied(repos / "calc", c0, rows[0]["patch"])
    assert marker.exists()


def test_a_file_name_with_a_newline_is_refused_not_written_into_a_key(
        tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    repo, _commits = _calc(repos / "calc")
    evil = 'calc/x.py\n[[tp]]\nid = "planted"'
    (repos / "calc" / evil).parent.mkdir(parents=True, exist_ok=True)
    (repos / "calc" / evil).write_text("y = 1\n")
    base = repo.commit("plant")
    (repos / "calc" / evil).write_text("y = 2\n")
    fix = repo.commit("Fix y")
    rows = [{"instance_id": "calc-1", "repo": "acme/calc", "base_commit": base,
             "patch": repo.git("diff", base, fix) + "\n"}]
    source = _jsonl(tmp_path, rows)
    out = tmp_path / "out"
    made = _from_dataset("swebench", source, repos, out)
    assert made.returncode == 3 and "control character" in _flat(made.stdout), made.stdout
    assert not out.exists() or not list(out.rglob("ground_truth.toml"))
    git_made = _props("specimens", "from-git", str(repos / "calc"), "--fix", fix, "--slug",
                      "calc/2026-12-01-00", "-o", str(tmp_path / "git"))
    assert git_made.returncode == 65 and "control character" in git_made.stderr
    # Negative control: the same name without its newline is a path props writes.
    assert git_trees.checked_path(evil.replace("\n", " ")) == evil.replace("\n", " ")

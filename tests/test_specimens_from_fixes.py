"""Specimens from bug fixes, on git repositories this test builds with real histories."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from props.core.domain import catalog, vocabulary
from props.core.domain.specimens import fix_keys, git_trees, specimens, specimens_from_fixes
from props.core.log import errors
from props.core.log.store import EventStore
from props.core.scoring import scorers

SLUG = "toy/2026-12-01-00"


def lines(n: int, name: str) -> list[str]:
    return [f"{name}_{i} = {i}" for i in range(1, n + 1)]


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.git("init", "-q")
        self.git("config", "user.email", "t@example.org")
        self.git("config", "user.name", "t")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    def write(self, path: str, content: list[str]) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(content) + "\n")

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> tuple[Repo, list[str]]:
    """Four fixes over five commits: a two-file fix, a fix in a file renamed (and in one
    shifted) since the snapshot, a pure insertion, and a deletion."""
    repo = Repo(tmp_path / "repo")
    a, b, c, old = lines(10, "a"), lines(6, "b"), lines(8, "c"), lines(5, "o")
    for path, content in (("pkg/a.py", a), ("pkg/b.py", b), ("pkg/c.py", c),
                          ("pkg/old.py", old)):
        repo.write(path, content)
    repo.commit("the code as it was")
    a[2], b[4] = "a_3 = 0  # fixed", "b_5 = 0  # fixed"
    repo.write("pkg/a.py", a)
    repo.write("pkg/b.py", b)
    two_files = repo.commit("Fix the off-by-one in a and b\n\nBoth counted from 1.")
    repo.git("mv", "pkg/old.py", "pkg/new.py")
    c = ["# a header", "# of two lines", *c]
    repo.write("pkg/c.py", c)
    repo.commit("Rename old to new; a header for c")
    moved = lines(5, "o")
    moved[3] = "o_4 = 0  # fixed"
    c[6] = "c_5 = 0  # fixed"  # c_5 moved down by the header
    repo.write("pkg/new.py", moved)
    repo.write("pkg/c.py", c)
    renamed = repo.commit("Fix o_4 and c_5")
    a.insert(6, "check(a_6)")
    repo.write("pkg/a.py", a)
    inserted = repo.commit("Check a_6 before use")
    del a[8:10]  # a_8 and a_9 (after the inserted line)
    repo.write("pkg/a.py", a)
    deleted = repo.commit("Drop the stale a_8 and a_9")
    return repo, [deleted, two_files, inserted, renamed]  # any order: they are sorted


def test_the_fixes_land_on_the_buggy_lines(history: tuple[Repo, list[str]],
                                           tmp_path: Path) -> None:
    repo, fixes = history
    snapshot, found, base = specimens_from_fixes.from_git(repo.root, fixes)
    assert base == repo.git("rev-list", "--max-parents=0", "HEAD")  # before the oldest fix
    assert snapshot["pkg/old.py"].splitlines()[3] == "o_4 = 4"  # the code before the fixes
    got = {d.name: d.ranges for d in found}
    assert got == {
        "fix-the-off-by-one-in-a-and-b": {"pkg/a.py": [(3, 3)], "pkg/b.py": [(5, 5)]},
        "fix-o-4-and-c-5": {"pkg/c.py": [(5, 5)], "pkg/old.py": [(4, 4)]},  # carried back
        "check-a-6-before-use": {"pkg/a.py": [(6, 7)]},  # around the insertion
        "drop-the-stale-a-8-and-a-9": {"pkg/a.py": [(8, 9)]},
    }
    inserted = next(d for d in found if d.name == "check-a-6-before-use")
    assert any("inserts lines" in t for t in inserted.todo)

    fix_keys.write(tmp_path / "out", SLUG, snapshot, found, "the test")
    [specimen] = specimens.load_valid(tmp_path / "out")  # `props specimens validate` passes
    gt = specimen.ground_truth
    assert gt.true_positives[0].rationale.startswith("Fix the off-by-one")
    # One file set per neighbourhood: here every fix's folder is the whole snapshot.
    assert [(fs.name, sorted(fs.files)) for fs in gt.file_sets] == [
        ("fix-the-off-by-one-in-a-and-b", sorted(snapshot))]

    # A critic that reports exactly the fixes' lines finds every defect.
    issues = {tp.id: [catalog.Location(file=loc.file, ranges=loc.ranges)
                      for occ in tp.occurrences for loc in occ.locations]
              for tp in gt.true_positives}
    matches = scorers.rule("tiered@2").match_run(issues, gt)
    occurrences = sum(len(tp.occurrences) for tp in gt.true_positives)
    assert sum(m.find for m in matches.values()) == occurrences == 4


def test_a_fix_that_only_adds_a_file_is_left_for_a_person(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    repo.write("pkg/a.py", lines(3, "a"))
    repo.commit("start")
    repo.write("pkg/guard.py", ["def guard(): ..."])
    added = repo.commit("Add the missing guard")
    snapshot, found, _base = specimens_from_fixes.from_git(repo.root, [added])
    assert found[0].ranges == {} and any("adds \"pkg/guard.py\"" in t for t in found[0].todo)
    root = fix_keys.write(tmp_path / "out", SLUG, snapshot, found, "the test")
    assert "left out" in (root / "ground_truth.toml").read_text()


def test_from_diff_and_the_command(tmp_path: Path) -> None:
    buggy, fixed = tmp_path / "buggy", tmp_path / "fixed"
    for root, value in ((buggy, "1"), (fixed, "2")):
        (root / "m").mkdir(parents=True)
        (root / "m" / "x.py").write_text(f"a = 0\nb = {value}\nc = 0\n")
    out = subprocess.run(
        [sys.executable, "-m", "props.tools.cli", "specimens", "from-diff", str(buggy),
         str(fixed), "--id", "b-wrong", "--rationale", "b must be 2", "--slug", SLUG,
         "-o", str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    [specimen] = specimens.load_valid(tmp_path / "out")
    [tp] = specimen.ground_truth.true_positives
    assert (tp.id, tp.rationale) == ("b-wrong", "b must be 2")
    assert [(loc.file, [(r.start, r.end) for r in loc.ranges])
            for loc in tp.occurrences[0].locations] == [("m/x.py", [(2, 2)])]
    again = subprocess.run(
        [sys.executable, "-m", "props.tools.cli", "specimens", "from-diff", str(buggy),
         str(fixed), "--slug", SLUG, "-o", str(tmp_path / "out")],
        capture_output=True, text=True, check=False)
    assert again.returncode == 78 and "exists already" in again.stderr  # never overwritten


def _commit_with_tree_entry(repo: Repo, name: str, message: str) -> str:
    """A commit whose root tree holds `name` (git mktree takes `..` and `.git`, which no work
    tree can): a folder of that name with one file."""
    blob = subprocess.run(["git", "-C", str(repo.root), "hash-object", "-w", "--stdin"],
                          input=b"escaped = True\n", check=True,
                          capture_output=True).stdout.decode().strip()
    inner = subprocess.run(["git", "-C", str(repo.root), "mktree"],
                           input=f"100644 blob {blob}\tplanted.py\n".encode(), check=True,
                           capture_output=True).stdout.decode().strip()
    head_tree = repo.git("rev-parse", "HEAD^{tree}")
    listing = repo.git("ls-tree", head_tree)
    outer = subprocess.run(["git", "-C", str(repo.root), "mktree"],
                           input=f"{listing}\n040000 tree {inner}\t{name}\n".encode(),
                           check=True, capture_output=True).stdout.decode().strip()
    return repo.git("commit-tree", outer, "-p", "HEAD", "-m", message)


@pytest.mark.parametrize("name", ["..", ".git", "."])
def test_a_tree_entry_that_climbs_out_is_refused_with_nothing_written(
        tmp_path: Path, name: str) -> None:
    repo = Repo(tmp_path / "repo")
    repo.write("pkg/a.py", lines(5, "a"))
    repo.commit("the code")
    planted = _commit_with_tree_entry(repo, name, "plant")
    repo.git("update-ref", "HEAD", planted)
    repo.write("pkg/a.py", ["a_1 = 0  # fixed", *lines(5, "a")[1:]])
    repo.git("add", "pkg/a.py")
    fix = repo.commit("Fix a")
    out = tmp_path / "deep" / "out"
    out.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "from-git",
                           str(repo.root), "--fix", fix, "--slug", SLUG, "-o", str(out)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 65, done.stderr
    assert "never writes" in done.stderr and "Traceback" not in done.stderr
    written = [p for p in tmp_path.rglob("planted.py") if "repo" not in p.parts]
    assert written == [] and list(out.iterdir()) == []


@pytest.mark.parametrize(("raw", "refused"), [(b"x\xff.py", True), (b"x\xc3\xa9.py", False)])
def test_a_name_that_is_not_utf8_is_refused_with_nothing_written(
        tmp_path: Path, raw: bytes, refused: bool) -> None:
    """The probe: a fixed file named `x\\xff.py` (main: exit 70, a UnicodeDecodeError from
    git diff's listing; its snapshot had the name with a replacement character). Negative
    control: a name in UTF-8 (x\u00e9.py) is a defect path like any other."""
    repo = Repo(tmp_path / "repo")
    named = repo.root / os.fsdecode(raw)
    named.write_text("\n".join(lines(5, "a")) + "\n")
    repo.write("ok.py", lines(3, "o"))
    repo.commit("the code")
    named.write_text("\n".join(["a_1 = 0  # fixed", *lines(5, "a")[1:]]) + "\n")
    fix = repo.commit("Fix a")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "from-git",
                           str(repo.root), "--fix", fix, "--slug", SLUG, "-o", str(out)],
                          capture_output=True, text=True, check=False)
    if not refused:
        assert done.returncode == 0, done.stderr
        assert '"x\u00e9.py" = [[1, 1]]' in (out / SLUG / "ground_truth.toml").read_text()
        return
    assert done.returncode == 65, done.stderr
    assert "Traceback" not in done.stderr
    assert "path that is not UTF-8: 'x\\xff.py'" in done.stderr, done.stderr
    assert not out.exists() or list(out.iterdir()) == []


def test_a_large_blob_is_listed_not_loaded(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    repo.write("pkg/a.py", lines(5, "a"))
    big = repo.root / "data.bin"
    big.write_bytes(b"x" * (vocabulary.MAX_SPECIMEN_FILE_BYTES + 1))
    repo.commit("the code")
    skipped: list[str] = []
    files = git_trees.tree(repo.root, "HEAD", skipped)
    assert set(files) == {"pkg/a.py"}
    assert len(skipped) == 1 and skipped[0].startswith("data.bin (")


def _fix_with_a_test(tmp_path: Path) -> tuple[Repo, str]:
    repo = Repo(tmp_path / "repo")
    repo.write("src/pkg/calc.py", lines(8, "c"))
    repo.write("tests/test_calc.py", lines(4, "t"))
    repo.commit("the code")
    fixed = lines(8, "c")
    fixed[3] = "c_4 = 0  # fixed"
    repo.write("src/pkg/calc.py", fixed)
    repo.write("tests/test_calc.py", [*lines(4, "t"), "def test_rounding():", "    assert 1"])
    return repo, repo.commit(
        "Fix rounding that reaches 1000 before 999\n\nIt rounded twice.\n\n"
        "Co-authored-by: A <a@example.org>\nSigned-off-by: B <b@example.org>")


def _key(repo: Repo, fix: str, out: Path, *extra: str) -> str:
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "from-git",
                           str(repo.root), "--fix", fix, "--slug", SLUG, "-o", str(out),
                           *extra], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return (out / SLUG / "ground_truth.toml").read_text()


def test_a_fix_that_adds_a_test_is_a_defect_in_its_source_only(tmp_path: Path) -> None:
    repo, fix = _fix_with_a_test(tmp_path)
    key = _key(repo, fix, tmp_path / "out")
    occurrences = [line for line in key.splitlines() if line.startswith("  {")]
    assert occurrences == ['  { "src/pkg/calc.py" = [[4, 4]] },']
    assert "# note: the fix also changes \"tests/test_calc.py\"" in key
    assert 'id = "fix-rounding-that-reaches-1000-before-999"' in key  # whole words
    assert "Co-authored-by" not in key and "Signed-off-by" not in key
    # Negative control: with every path a defect path, the test's lines come back.
    every = _key(repo, fix, tmp_path / "every", "--defect-paths", "**")
    assert "tests/test_calc.py" in "".join(
        line for line in every.splitlines() if line.startswith("  {"))


def test_an_id_is_cut_between_words_never_inside_one() -> None:
    ident = specimens_from_fixes._ident("x" * 3 + " " + "1000" * 20, [])
    assert ident == "xxx"  # the number does not fit whole: left out, not cut
    assert specimens_from_fixes._ident("Fix the rounding that reaches 1000 in the report "
                                       "totals of long runs", []) == \
        "fix-the-rounding-that-reaches-1000-in-the-report-totals-of"


def test_a_fix_only_in_tests_is_listed_not_written(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "repo")
    repo.write("src/a.py", lines(4, "a"))
    repo.write("tests/test_a.py", lines(4, "t"))
    repo.commit("the code")
    repo.write("tests/test_a.py", lines(5, "t"))
    fix = repo.commit("Fix the flaky test")
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "from-git",
                           str(repo.root), "--fix", fix, "--slug", SLUG, "-o",
                           str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    key = (tmp_path / "out" / SLUG / "ground_truth.toml").read_text()
    assert "[[tp]]" not in key and "not written as a true positive" in key
    said = " ".join(done.stdout.split())  # (the console wraps long lines)
    assert "left out of the key: fix 'fix-the-flaky-test': no source line" in said, said
    assert "0 true positive(s) from 1 fix(es)" in said


def test_validate_refuses_a_todo_unless_told(tmp_path: Path) -> None:
    repo, fix = _fix_with_a_test(tmp_path)
    out = tmp_path / "out"
    _key(repo, fix, out)

    def validate(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens",
                               "validate", str(out), *extra], capture_output=True, text=True,
                              check=False)

    refused = validate()
    assert refused.returncode == 65 and "a TODO is left" in refused.stderr
    assert validate("--allow-todo").returncode == 0


async def test_serve_syncs_no_key_with_a_todo_at_start(tmp_path: Path,
                                                       store: EventStore) -> None:
    """`props serve`'s start-up sync (auto_sync_specimens) refuses a key with a TODO as
    `specimens sync` does, and records nothing; negative control: the bundled specimens,
    whose keys hold no TODO, are synced."""
    from props.tools.command_line.handlers import service

    repo, fix = _fix_with_a_test(tmp_path)
    out = tmp_path / "out"
    _key(repo, fix, out)
    with pytest.raises(errors.InvalidEvent, match="TODO"):
        await service._sync_specimens(store, out)
    assert await store.pool.fetchval("SELECT count(*) FROM props.events WHERE type = "
                                     "'snapshot.synced'") == 0
    bundled = Path(specimens.__file__).resolve().parents[3] / "tools" / "bundled" / "specimens"
    await service._sync_specimens(store, bundled)  # checked keys: synced
    assert await store.pool.fetchval("SELECT count(*) FROM props.events WHERE type = "
                                     "'snapshot.synced'") > 0


def test_the_snapshot_leaves_out_ci_binaries_and_what_is_excluded(tmp_path: Path) -> None:
    """CI configuration and binary files never reach a snapshot; --include and --exclude
    choose among the rest (tests stay in as context)."""
    repo = Repo(tmp_path / "repo")
    repo.write("pkg/calc.py", lines(5, "x"))
    repo.write("tests/test_calc.py", ["def test_x():", "    assert 1"])
    repo.write(".github/workflows/ci.yml", ["on: push"])
    repo.write("vendor/big.py", lines(3, "v"))
    (repo.root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (repo.root / "nul.txt").write_bytes(b"text\x00with a NUL")
    base = repo.commit("the code")
    skipped: list[str] = []
    every = git_trees.tree(repo.root, base, skipped)
    assert sorted(every) == ["pkg/calc.py", "tests/test_calc.py", "vendor/big.py"]
    assert any("logo.png (binary" in s for s in skipped)
    assert any("nul.txt (binary" in s for s in skipped)
    assert any("1 file(s) the path filters leave out" in s for s in skipped)
    chosen = git_trees.tree(repo.root, base, [], git_trees.snapshot_filter(
        include=["pkg/**", "tests/**", "vendor/**"], exclude=["vendor/**"]))
    assert sorted(chosen) == ["pkg/calc.py", "tests/test_calc.py"]
    # The control: with no filter at all, the CI file would have come in.
    assert ".github/workflows/ci.yml" in git_trees.tree(
        repo.root, base, [], lambda path: True)


def test_a_squash_merges_trailers_leave_the_rationale_wherever_they_stand() -> None:
    """The shape of a GitHub squash merge, as tenacity's fix e5179bd has it: each squashed
    commit's trailers inside the body, and a rule of dashes at the end."""
    message = ("fix: reraise underlying exception when TryAgain wraps a cause (#640)\n\n"
               "* fix: reraise underlying exception\n\nWhen reraise=True ...\n\nFixes #544\n\n"
               "* Apply suggestions from code review\n\n"
               "Co-authored-by: Copilot Autofix <1+Copilot@users.noreply.github.com>\n\n"
               "---------\n\nSigned-off-by: B <b@example.org>\n")
    kept = specimens_from_fixes.without_trailers(message)
    assert "-by:" not in kept and "-----" not in kept and "\n\n\n" not in kept
    assert kept.endswith("* Apply suggestions from code review")
    assert "Fixes #544" in kept  # a reference without a colon is the author's words


def test_from_git_counts_the_todos_validate_finds(tmp_path: Path) -> None:
    repo, fix = _fix_with_a_test(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "from-git",
                           str(repo.root), "--fix", fix, "--slug", SLUG, "-o", str(out)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "COLUMNS": "300"})
    said = int(re.search(r"(\d+) TODO\(s\) to check", done.stdout)[1])  # type: ignore[index]
    assert "`props specimens validate" in done.stdout
    found = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "validate",
                            str(out)], capture_output=True, text=True, check=False)
    assert said == found.stderr.count("a TODO is left") > 0
    # (the control: the fix's own TODO list is shorter than what the key holds)
    _snapshot, found_defects, _base = specimens_from_fixes.from_git(repo.root, [fix])
    assert sum(len(d.todo) for d in found_defects) < said


def test_git_s_diff_takes_40000_repeated_lines_and_finds_the_changed_one() -> None:
    """difflib took minutes on this (a per-test timeout bounds it here)."""
    before = "x = 1\n" * 40_000
    after = "x = 1\n" * 20_000 + "x = 2\n" + "x = 1\n" * 19_999
    changed = specimens_from_fixes.changed_lines(before, after)
    assert changed.code == [(20_001, 20_001)] and not changed.guessed
    kept, lost = specimens_from_fixes.carried_back([(20_001, 20_001)], before,
                                                   "head\n" + before)
    assert (kept, lost) == ([(20_002, 20_002)], False)


def test_spacing_and_version_hunks_are_set_apart_from_code() -> None:
    before = "__version__ = '0.1'\n-\nif a: # c\n-\nb = 1\n-\nc = 'a b'\n"
    after = "__version__ = '0.2'\n-\nif a:  # c\n-\nb = 2\n-\nc = 'ab'\n"
    changed = specimens_from_fixes.changed_lines(before, after)
    assert (changed.version, changed.whitespace) == ([(1, 1)], [(3, 3)])
    assert changed.code == [(5, 5), (7, 7)]  # (a string's inner space is not spacing)
    # Negative control: indentation is code (Python), not spacing.
    assert specimens_from_fixes.changed_lines("if a:\n    b\n", "if a:\n        b\n"
                                              ).code == [(2, 2)]


def test_600_paths_of_one_blob_are_read_once(tmp_path: Path) -> None:
    """The tree is read one blob at a time, and one blob named 600 times is one text."""
    repo = Repo(tmp_path / "repo")
    for n in range(600):
        repo.write(f"pkg/m{n}.py", lines(200, "same"))
    repo.write("pkg/other.py", lines(3, "o"))
    repo.commit("many copies")
    files = git_trees.tree(repo.root, "HEAD")
    assert len(files) == 601
    copies = {id(text) for path, text in files.items() if path != "pkg/other.py"}
    assert len(copies) == 1  # shared, not 600 copies
    assert id(files["pkg/other.py"]) not in copies  # (the control: another blob is its own)


def test_del_and_c1_controls_in_a_name_are_escaped_in_the_key() -> None:
    """A path or a fix's name holding DEL (0x7f) or a C1 control (0x80-0x9f): json.dumps
    leaves them raw, and a raw DEL makes the whole ground_truth.toml unreadable (TOML refuses
    it in strings and comments). Negative control: with `quoted` as json.dumps alone (the old
    code) the key holds the raw characters and tomllib refuses it."""
    import json
    import tomllib

    path, name = "pkg/a\x7fb\x85c\x9f.py", "fix\x7f\x80"
    d = specimens_from_fixes.Defect(name, "why", {path: [(1, 1)]}, [],
                                    notes={path: [([(2, 2)], "spacing")]})
    key = fix_keys.ground_truth([d], {path: "x = 1\ny = 2\n"}, "a test")
    assert not re.search("[\x7f-\x9f]", key)
    doc = tomllib.loads(key)
    assert doc["tp"][0]["id"] == name
    assert list(doc["tp"][0]["occurrences"][0]) == [path]
    assert name in doc["file_sets"]
    raw = json.dumps(path, ensure_ascii=False)  # the old quoting
    assert "\x7f" in raw
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(f"x = {raw}\n")

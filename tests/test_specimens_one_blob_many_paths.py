"""A repository that names one large blob at many paths: git stores it once (the probe's
repository was 172 KB), and so must a snapshot made of it. The probe: one 1 MB blob at 1,200
paths made `props specimens from-git` peak at 1.2 GB of memory and write 1.16 GB (each
path its own copy, and the folder read back path by path to validate it).

The repository is built with git's plumbing (one blob, trees naming it 1,200 times), so
nothing of 1.2 GB is ever written by the test itself; the command runs as a subprocess whose
own peak memory is read from the kernel (wait4), and what it wrote is counted by inode."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from props.core.domain import catalog, vocabulary
from props.core.domain.specimens import (
    fix_keys,
    git_trees,
    specimen_format,
    specimen_sync,
    specimens,
    specimens_from_fixes,
)
from props.core.log.store import EventStore

SLUG = "probe/2026-12-06-00"
PATHS = 1200
FOLDERS = 12  # of 100 paths each
# The whole `props` process, interpreter, imports and the git it waits for included: 50 MiB
# alone, 355 MiB once in the whole suite on a loaded machine (wait4 counts its children's
# peaks too); the code before this fix peaked at 1,193 MiB, which this still catches.
MAX_RSS = 512 * 1024 * 1024
LINE = "x = 'abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz'\n"
BLOB = LINE * (1_000_000 // len(LINE))  # ~1 MB of text, within the 1 MiB file limit


def git(repo: Path, *args: str, given: str | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=given, check=True,
                          capture_output=True, text=True).stdout.strip()


def _tree(repo: Path, entries: list[tuple[str, str, str]]) -> str:
    """A tree object of (kind, id, name): blob or tree."""
    mode = {"blob": "100644", "tree": "040000"}
    listing = "".join(f"{mode[k]} {k} {oid}\t{name}\n" for k, oid, name in entries)
    return git(repo, "mktree", given=listing)


def one_blob_repo(root: Path, fix_the_blob: bool = False) -> tuple[Path, str]:
    """The probe's repository: BLOB at data/dNN/fNNNN.py (1,200 paths, one object), and a
    small package whose fix commit is HEAD (so from-git has a defect to key); with
    `fix_the_blob`, the fix changes BLOB's first line at all 1,200 paths too."""
    root.mkdir()
    git(root, "init", "-q")

    def data_tree(text: str) -> str:
        blob = git(root, "hash-object", "-w", "--stdin", given=text)
        return _tree(root, [("tree", _tree(root, [("blob", blob, f"f{n:04}.py")
                                                  for n in range(d * 100, d * 100 + 100)]),
                             f"d{d:02}") for d in range(FOLDERS)])

    data = data_tree(BLOB)
    fixed_data = data_tree("y = 1\n" + BLOB[len(LINE):]) if fix_the_blob else data

    def package(body: str) -> str:
        init = git(root, "hash-object", "-w", "--stdin", given="")
        calc = git(root, "hash-object", "-w", "--stdin", given=body)
        return _tree(root, [("blob", init, "__init__.py"), ("blob", calc, "calc.py")])

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}

    def commit(pkg: str, message: str, *parents: str) -> str:
        top = _tree(root, [("tree", fixed_data if parents else data, "data"),
                           ("tree", pkg, "pkg")])
        args = [a for p in parents for a in ("-p", p)]
        return subprocess.run(["git", "-C", str(root), "commit-tree", top, *args, "-m",
                               message], check=True, capture_output=True, text=True,
                              env=env).stdout.strip()

    base = commit(package("def add(a, b):\n    return a - b\n"), "the code")
    fix = commit(package("def add(a, b):\n    return a + b\n"), "Fix add subtracting", base)
    git(root, "update-ref", "HEAD", fix)
    return root, fix


def run_measured(*argv: str) -> tuple[int, str, int, int]:
    """Run `argv`; its exit code, its output (stdout and stderr), its own peak RSS and the
    bytes it (and the git it ran) wrote to files, temporary ones included, from wait4's
    rusage of that one child (not the max over every child this test process ever had, as
    RUSAGE_CHILDREN would be)."""
    with open(os.devnull, "rb") as nothing, \
            subprocess.Popen(argv, stdin=nothing, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        output = proc.stdout.read().decode(errors="replace")
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, output, usage.ru_maxrss * 1024, usage.ru_oublock * 512


def bytes_on_disk(folder: Path) -> int:
    """The size of every distinct file under `folder`, each inode counted once (a hard link
    costs nothing, a copy its size)."""
    seen: dict[tuple[int, int], int] = {}
    for path in folder.rglob("*"):
        st = path.lstat()
        if path.is_file() and not path.is_symlink():
            seen[st.st_dev, st.st_ino] = st.st_size
    return sum(seen.values())


def test_the_measures_see_what_they_measure(tmp_path: Path) -> None:
    """Negative controls for the two measures the next test relies on: a child that holds
    250 MB is seen holding it, and a copy of a file is counted where a hard link is not."""
    code, _out, rss, _written = run_measured(sys.executable, "-c", "b = b'x' * 250_000_000")
    assert code == 0 and rss > 250_000_000
    (tmp_path / "a").write_text(BLOB)
    os.link(tmp_path / "a", tmp_path / "linked")
    assert bytes_on_disk(tmp_path) == len(BLOB)
    (tmp_path / "copy").write_text(BLOB)
    assert bytes_on_disk(tmp_path) == 2 * len(BLOB)


def test_one_blob_at_1200_paths_is_written_and_held_once(tmp_path: Path) -> None:
    """The probe's repository: from-git stays under 200 MB (it peaked at 1.2 GB) and writes
    the blob once (it wrote 1.16 GB); the folder validates with all 1,200 paths, each the
    blob's text."""
    repo, fix = one_blob_repo(tmp_path / "repo")
    out = tmp_path / "out"
    code, output, rss, _written = run_measured(
        sys.executable, "-m", "props.tools.cli", "specimens", "from-git", str(repo), "--fix",
        fix, "--slug", SLUG, "-o", str(out))
    assert code == 0, output
    assert rss < MAX_RSS, f"peak RSS {rss / 2**20:.0f} MiB"
    written = bytes_on_disk(out)
    assert len(BLOB) < written < len(BLOB) + 64 * 1024, f"{written:,} bytes written"
    [snapshot] = specimens.load_valid(out)
    data = {p: b for p, b in snapshot.files.items() if p.startswith("data/")}
    assert len(data) == PATHS and set(data.values()) == {BLOB.encode()}
    assert len({id(b) for b in data.values()}) == 1  # read back as one object, not 1,200
    assert [tp.id for tp in snapshot.ground_truth.true_positives] == ["fix-add-subtracting"]


def test_a_fix_of_the_blob_at_1200_paths_is_diffed_once(tmp_path: Path) -> None:
    """A fix that changes the blob at all 1,200 paths: git's diff runs once for the pair of
    texts, not once a path (it wrote 2.4 GB of temporary files, 2 MB a path, in 90 s). Its
    key has 1,200 files in one occurrence, past the catalog's 100: refused in one line
    naming the bound (65), never a traceback."""
    repo, fix = one_blob_repo(tmp_path / "repo", fix_the_blob=True)
    code, output, rss, written = run_measured(
        sys.executable, "-m", "props.tools.cli", "specimens", "from-git", str(repo), "--fix",
        fix, "--slug", SLUG, "-o", str(tmp_path / "out"))
    assert code == 65 and "Traceback" not in output, output
    assert "past a bound of the ground truth: locations: List should have at most 100" \
        in output
    assert rss < MAX_RSS and written < 64 * 2**20, f"{written:,} bytes written"


async def test_the_linked_snapshot_syncs_as_copies_would(tmp_path: Path,
                                                         store: EventStore) -> None:
    """Hard links change nothing of what is recorded: the entries are each path's text as
    git holds it (hash and size), the event lists all 1,200 paths, and the blob table holds
    the content once."""
    repo, fix = one_blob_repo(tmp_path / "repo")
    snapshot, found, _base = specimens_from_fixes.from_git(repo, [fix])
    fix_keys.write(tmp_path / "out", SLUG, snapshot, found, "test")
    [one] = specimens.load_valid(tmp_path / "out")
    digests = {t: hashlib.sha256(t.encode()).hexdigest() for t in set(snapshot.values())}
    assert one.file_entries == [catalog.FileEntry(path=p, sha256=digests[t],
                                                  size=len(t.encode()))
                                for p, t in sorted(snapshot.items())]
    report = await specimen_sync.sync(store, str(tmp_path / "out"), [one])
    assert report.added == [SLUG]
    [synced] = (await specimen_sync.history(store))[SLUG].versions
    digest = digests[BLOB]
    assert sum(f.sha256 == digest and f.size == len(BLOB) for f in synced.files) == PATHS
    assert synced.files == one.file_entries
    assert await store.get_blob(digest) == BLOB.encode()


def test_a_snapshot_past_its_limit_is_refused_before_a_file_is_read_further(
        tmp_path: Path) -> None:
    """Distinct content past the limit refuses the tree (from git) and the folder (validate,
    sync, from-diff), naming the limit; the same content at more paths is within it."""
    repo, _fix = one_blob_repo(tmp_path / "repo")
    assert len(git_trees.tree(repo, "HEAD", max_bytes=len(BLOB) + 100)) == PATHS + 2
    with pytest.raises(specimens.SnapshotTooLarge, match="distinct file content"):
        git_trees.tree(repo, "HEAD", max_bytes=len(BLOB) - 1)
    folder = tmp_path / "code"
    folder.mkdir()
    for n in range(3):
        (folder / f"m{n}.py").write_text(f"# {n}\n{BLOB}")
    problems: list[specimen_format.Problem] = []
    assert len(specimens.read_code(folder, vocabulary.MAX_SPECIMEN_FILE_BYTES, problems,
                                   3 * (len(BLOB) + 4))) == 3
    with pytest.raises(specimens.SnapshotTooLarge):
        specimens.read_code(folder, vocabulary.MAX_SPECIMEN_FILE_BYTES, problems,
                            2 * (len(BLOB) + 4))
    for n in range(3, 9):  # copies (not links) of m0.py: held once, counted once
        (folder / f"m{n}.py").write_bytes((folder / "m0.py").read_bytes())
    read = specimens.read_code(folder, vocabulary.MAX_SPECIMEN_FILE_BYTES, problems,
                               3 * (len(BLOB) + 4))
    assert len(read) == 9 and len({id(b) for b in read.values()}) == 3 and problems == []

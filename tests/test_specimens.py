"""Specimens: strict validation with file and line, versioned sync, bundled samples."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from props.core.domain import catalog, streams
from props.core.domain.specimens import specimen_format, specimen_sync, specimens
from props.core.log.store import EventStore
from props.tools.bundled.samples import samples_dir

SAMPLE = "csvtool/2025-09-03-00"


def test_files_hash_is_md5_of_sorted_member_paths() -> None:
    # md5 of "a.py\nb/c.py", computed outside props (printf 'a.py\nb/c.py' | md5sum).
    assert specimen_format.files_hash(["b/c.py", "a.py"]) == "001899e6e38492ff9f7d12d361bc3cbc"


def test_bundled_samples_are_valid_and_realistic() -> None:
    found, problems = specimens.discover(samples_dir())
    assert problems == []
    assert len(found) >= 3
    for s in found:
        c = s.counts
        assert c["tps"] >= 4 and c["fps"] >= 2 and c["file_sets"] >= 3
        assert sum(len(b.splitlines()) for b in s.files.values()) >= 200
        sizes = {len(fs.files) for fs in s.ground_truth.file_sets}
        assert len(sizes) >= 2  # file sets of several sizes


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(samples_dir() / SAMPLE, tmp_path / SAMPLE)
    return tmp_path


def gt_file(tree: Path) -> Path:
    return tree / SAMPLE / specimen_format.GROUND_TRUTH_FILE


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_every_kind_of_problem_is_reported_with_file_and_line(tree: Path) -> None:
    path = gt_file(tree)
    text = path.read_text()
    text = text.replace('"csvtool/stats.py" = [[47, 48]]', '"csvtool/stats.py" = [[47, 480]]')
    text = text.replace('{ "csvtool/reader.py" = [[22, 23]] }', '{ "csvtool/gone.py" = [[1, 2]] }')
    text = text.replace('id = "sniffer-fallback"', 'id = "median-even-length"')
    text = text.replace('severity = "low"', 'severity = "low"\nconfidence = 0.9')
    text += '\n[scopes]\nstats = ["head-off-by-one#1"]\n'
    path.write_text(text)
    found, problems = specimens.discover(tree)
    assert found == []
    messages = {p.message: p for p in problems}
    assert all(p.file == path for p in problems), problems

    def expect(fragment: str, line_text: str) -> None:
        matching = [p for m, p in messages.items() if fragment in m]
        assert matching, f"no problem mentions {fragment!r}: {list(messages)}"
        assert matching[0].line == line_of(path, line_text), matching[0]

    expect("goes past the end of 'csvtool/stats.py' (74 lines)", "[[47, 480]]")
    expect("file 'csvtool/gone.py' does not exist", "csvtool/gone.py")
    expect("unknown key 'confidence' in tp 'file-handle-leak'", "confidence")
    expect("claims 'head-off-by-one#1', which lies outside the file set", 'stats = ["head')
    assert len(problems) == 5
    dup = next(p for p in problems if "duplicate id 'median-even-length'" in p.message)
    first, second = [i for i, line in enumerate(text.splitlines(), 1)
                     if 'id = "median-even-length"' in line]
    assert dup.line == second and f"(first at line {first})" in dup.message
    assert str(dup).startswith(f"{path}:{dup.line}: ")


def test_invalid_toml_names_its_line(tree: Path) -> None:
    path = gt_file(tree)
    lines = path.read_text().splitlines()
    lines[9] = "severity = = oops"
    path.write_text("\n".join(lines))
    _found, problems = specimens.discover(tree)
    assert len(problems) == 1 and problems[0].line == 10
    assert "invalid TOML" in problems[0].message


def test_missing_parts_are_named(tmp_path: Path) -> None:
    (tmp_path / "proj" / "2025-01-01-00" / "code").mkdir(parents=True)
    (tmp_path / "Bad Name" / "x").mkdir(parents=True)
    (tmp_path / "Bad Name" / "x" / "ground_truth.toml").write_text("")
    _found, problems = specimens.discover(tmp_path)
    text = "\n".join(str(p) for p in problems)
    assert "no ground_truth.toml" in text
    assert "is not PROJECT/YYYY-MM-DD-NN" in text


async def test_sync_versions_and_retirement(store: EventStore, tree: Path) -> None:
    source = str(tree)
    found, _ = specimens.discover(tree)
    first = await specimen_sync.sync(store, source, found)
    assert first.added == [SAMPLE]
    count = await store.pool.fetchval("SELECT count(*) FROM props.events")
    again = await specimen_sync.sync(store, source, specimens.discover(tree)[0])
    assert again.appended == 0 and again.unchanged == [SAMPLE]
    assert await store.pool.fetchval("SELECT count(*) FROM props.events") == count

    path = gt_file(tree)
    path.write_text(path.read_text().replace("[[47, 48]]", "[[46, 48]]"))
    changed = await specimen_sync.sync(store, source, specimens.discover(tree)[0])
    assert changed.updated == [SAMPLE]
    h = (await specimen_sync.history(store))[SAMPLE]
    assert [v.version for v in h.versions] == [1, 2]
    old, new = h.versions
    assert old.ground_truth_hash != new.ground_truth_hash
    median = next(tp for tp in old.ground_truth.true_positives if tp.id == "median-even-length")
    assert median.occurrences[0].locations[0].ranges[0].start == 47  # the old one stays

    # Files are in the blob table by content hash.
    entry = old.files[0]
    assert len(await store.get_blob(entry.sha256)) == entry.size

    # Another source never retires this one's snapshots; removing it from its own does.
    assert (await specimen_sync.sync(store, "/elsewhere", [])).retired == []
    shutil.rmtree(tree / SAMPLE)
    gone = await specimen_sync.sync(store, source, [])
    assert gone.retired == [SAMPLE]
    h = (await specimen_sync.history(store))[SAMPLE]
    assert h.retired and len(h.versions) == 2
    retired = (await store.read_stream(streams.snapshot(SAMPLE)))[-1].event
    assert isinstance(retired, catalog.SnapshotRetired) and retired.version == 2


def test_scope_is_computed_from_occurrence_files(tree: Path) -> None:
    (s,), _ = specimens.discover(tree)
    scopes = {sc.files_hash: sc.occurrences for sc in s.ground_truth.scopes}
    sets = {fs.name: fs for fs in s.ground_truth.file_sets}
    assert scopes[sets["cli"].files_hash] == ["head-off-by-one#1"]
    assert len(scopes[None]) == s.counts["occurrences"]
    assert sets["cli"].files_hash == specimen_format.files_hash(["csvtool/output.py",
                                                                 "csvtool/cli.py"])


HOSTILE_TREES: dict[str, Callable[[Path], object]] = {
    "a symlink to a host file": lambda code: (code / "passwd.py").symlink_to("/etc/passwd"),
    "a symlink to the answer key": lambda code: (code / "gt.toml").symlink_to(
        "../ground_truth.toml"),
    "a symlinked folder": lambda code: (code / "more").symlink_to("/etc"),
    "a pipe": lambda code: os.mkfifo(code / "pipe.py"),
    "a file over the limit": lambda code: (code / "big.py").write_bytes(b"#" * (1024 * 1024 + 1)),
    "a file name that is not UTF-8": lambda code: open(
        os.path.join(os.fsencode(code), b"bad\xff.py"), "wb").close(),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_TREES))
def test_hostile_snapshot_files_are_refused_unread(tree: Path, kind: str) -> None:
    code = tree / SAMPLE / specimen_format.CODE_DIR
    HOSTILE_TREES[kind](code)
    found, problems = specimens.discover(tree)
    assert found == [] and len(problems) == 1, problems
    assert str(code) in str(problems[0].file)


def test_the_refusals_above_are_about_the_files(tree: Path) -> None:
    """Negative control: the same tree without them is valid, and a big file passes a
    larger limit."""
    code = tree / SAMPLE / specimen_format.CODE_DIR
    assert specimens.discover(tree)[1] == []
    (code / "big.py").write_bytes(b"#" * (1024 * 1024 + 1))
    assert specimens.discover(tree, max_file_bytes=2 * 1024 * 1024)[1] == []


def test_ground_truth_that_is_not_utf8_is_one_problem(tree: Path) -> None:
    gt_file(tree).write_bytes(gt_file(tree).read_bytes() + b"\n# \xff\xfe\n")
    found, problems = specimens.discover(tree)
    at = gt_file(tree).read_bytes().index(b"\xff")
    assert found == [] and [p.message for p in problems] == [f"is not UTF-8 (byte {at})"]


def test_validate_exits_65_with_one_line_per_problem(tree: Path) -> None:
    (tree / SAMPLE / specimen_format.CODE_DIR / "passwd.py").symlink_to("/etc/passwd")
    done = subprocess.run([sys.executable, "-m", "props.tools.cli", "specimens", "validate",
                           str(tree)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 65
    assert "passwd.py: is a symlink" in done.stderr and "Traceback" not in done.stderr

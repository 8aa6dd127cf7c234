"""Specimens on disk: snapshots of code with their ground truth, read and validated strictly.

A specimen directory holds one folder per snapshot, `PROJECT/YYYY-MM-DD-NN/`, with:

- `code/`: the snapshot's files (paths in the ground truth are relative to it);
- `ground_truth.toml`: true positives (`[[tp]]`), known false positives (`[[fp]]`), file sets
  (`[file_sets]`) and, optionally, stated scopes (`[scopes]`). See
  docs/reference/ground-truth-format.md.

Validation reports every problem at once, each with its file and line, and builds nothing
when there is one: ground truth that is only partly right would make every figure wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
from pathlib import Path
from typing import get_args

import orjson

from props.core.domain import catalog, vocabulary
from props.core.domain.specimens import specimen_format
from props.core.domain.specimens.specimen_format import CODE_DIR, GROUND_TRUTH_FILE, Problem
from props.core.log import errors

SLUG = re.compile(r"^[a-z0-9][a-z0-9_.-]*/\d{4}-\d{2}-\d{2}-\d{2}$")
SEVERITIES = set(get_args(catalog.Severity))

@dataclasses.dataclass(frozen=True)
class Specimen:
    """A validated snapshot: its files (path -> bytes) and its ground truth."""

    slug: str
    root: Path
    files: dict[str, bytes]
    ground_truth: catalog.GroundTruth

    @property
    def file_entries(self) -> list[catalog.FileEntry]:
        """Each file's path, sha256 and size; each distinct content hashed once (a snapshot
        may hold one content at a thousand paths)."""
        digests: dict[bytes, str] = {}
        for b in self.files.values():
            if b not in digests:
                digests[b] = hashlib.sha256(b).hexdigest()
        return [catalog.FileEntry(path=p, sha256=digests[b], size=len(b))
                for p, b in sorted(self.files.items())]

    @property
    def counts(self) -> dict[str, int]:
        gt = self.ground_truth
        return {
            "files": len(self.files),
            "tps": len(gt.true_positives),
            "occurrences": sum(len(tp.occurrences) for tp in gt.true_positives),
            "fps": len(gt.false_positives),
            "file_sets": len(gt.file_sets),
        }


def ground_truth_hash(gt: catalog.GroundTruth) -> str:
    """sha256 of the ground truth's canonical JSON (sorted keys): what grades cite."""
    canonical = orjson.dumps(gt.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


MAX_FILE_BYTES = vocabulary.MAX_SPECIMEN_FILE_BYTES


def _unsafe(path: Path, root: Path) -> str | None:
    """Why `path` (under `root`) cannot be part of a snapshot, if it cannot: anything that is
    not a plain file or folder of the snapshot itself (a symlink could hand the critic the
    answer key or a host file; a device or a pipe could hang the reader)."""
    if path.is_symlink():
        return f"is a symlink (to {os.readlink(path)!r}): snapshots hold plain files only"
    mode = path.lstat().st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "is not a plain file or folder (a device, pipe or socket)"
    try:
        path.relative_to(root).as_posix().encode("utf-8")
    except UnicodeEncodeError:
        return "has a name that is not UTF-8"
    if not path.resolve().is_relative_to(root.resolve()):
        return "resolves outside the snapshot's code/ folder"
    return None


class SnapshotTooLarge(errors.InvalidEvent):
    """A snapshot's distinct contents, summed, are past vocabulary.MAX_SNAPSHOT_BYTES: refused
    before anything of it is written (a file of a folder is read no further)."""

    def __init__(self, where: object, limit: int) -> None:
        self.reason = (f"holds more than {limit:,} bytes of distinct file content, the limit "
                       f"of a snapshot")
        super().__init__(f"{where} {self.reason}: choose fewer files (--include, --exclude); "
                         f"nothing was written")


def read_code(code_dir: Path, max_file_bytes: int, problems: list[Problem],
              max_total_bytes: int = vocabulary.MAX_SNAPSHOT_BYTES) -> dict[str, bytes]:
    """The snapshot's files, path -> bytes; what cannot be one is a problem, never read.
    Each distinct content is held once, by every path that has it: a hard link of a file
    read already is not read again, and a copy's bytes are dropped for the first one's.
    Past `max_total_bytes` of distinct content, SnapshotTooLarge (nothing more is read)."""
    code: dict[str, bytes] = {}
    by_inode: dict[tuple[int, int], bytes] = {}
    held: dict[bytes, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(code_dir, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            why = _unsafe(path, code_dir)
            shown = Path(dirpath, name.encode("utf-8", "replace").decode())
            if why is not None:
                problems.append(Problem(shown, None, why))
                if name in dirnames:
                    dirnames.remove(name)  # never walked into
                continue
            if name not in filenames:
                continue
            st = path.stat()
            if st.st_size > max_file_bytes:
                problems.append(Problem(path, None, f"is {st.st_size:,} bytes, over the limit "
                                                    f"of {max_file_bytes:,}"))
                continue
            data = by_inode.get((st.st_dev, st.st_ino))
            if data is None:
                read = path.read_bytes()
                data = by_inode[st.st_dev, st.st_ino] = held.setdefault(read, read)
                total += len(data) if data is read else 0
                if total > max_total_bytes:
                    raise SnapshotTooLarge(code_dir, max_total_bytes)
            code[path.relative_to(code_dir).as_posix()] = data
    return dict(sorted(code.items()))


def read_snapshot(root: Path, slug: str, max_file_bytes: int = MAX_FILE_BYTES
                  ) -> tuple[Specimen | None, list[Problem]]:
    """Read and validate one snapshot folder."""
    gt_path = root / GROUND_TRUTH_FILE
    code_dir = root / CODE_DIR
    problems: list[Problem] = []
    if not SLUG.match(slug):
        problems.append(Problem(root, None, f"{slug!r} is not PROJECT/YYYY-MM-DD-NN "
                                            "(lowercase project name)"))
    for path in (root, code_dir, gt_path):
        if path.is_symlink():
            problems.append(Problem(path, None, "is a symlink: snapshots hold plain files "
                                                "only"))
    if not code_dir.is_dir():
        problems.append(Problem(root, None, f"no {CODE_DIR}/ folder with the snapshot's files"))
    if not gt_path.is_file():
        problems.append(Problem(root, None, f"no {GROUND_TRUTH_FILE}"))
    if problems:
        return None, problems
    try:
        code = read_code(code_dir, max_file_bytes, problems)
    except SnapshotTooLarge as exc:
        return None, [Problem(code_dir, None, exc.reason)]
    if problems:
        return None, problems
    if not code:
        return None, [Problem(code_dir, None, "the snapshot has no files")]
    if gt_path.stat().st_size > max_file_bytes:
        return None, [Problem(gt_path, None, f"is over the limit of {max_file_bytes:,} bytes")]
    try:
        text = gt_path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [Problem(gt_path, None, f"is not UTF-8 (byte {exc.start})")]
    gt, problems = specimen_format.parse(gt_path, text, root, slug, code)
    if gt is None:
        return None, problems
    return Specimen(slug, root, code, gt), []


def discover(directory: Path, max_file_bytes: int = MAX_FILE_BYTES
             ) -> tuple[list[Specimen], list[Problem]]:
    """Every snapshot under `directory` (PROJECT/YYYY-MM-DD-NN/), validated."""
    if not directory.is_dir():
        return [], [Problem(directory, None, "not a directory")]
    specimens: list[Specimen] = []
    problems: list[Problem] = []
    roots = sorted(p.parent for p in directory.glob(f"*/*/{GROUND_TRUTH_FILE}"))
    roots += [p for p in sorted(directory.glob("*/*")) if p.is_dir() and p not in roots
              and (p / CODE_DIR).is_dir()]
    if not roots:
        problems.append(Problem(directory, None,
                                f"no snapshots (PROJECT/YYYY-MM-DD-NN/{GROUND_TRUTH_FILE})"))
    for root in sorted(set(roots)):
        slug = root.relative_to(directory).as_posix()
        specimen, found = read_snapshot(root, slug, max_file_bytes)
        problems += found
        if specimen is not None:
            specimens.append(specimen)
    return specimens, sorted(problems)


class InvalidSpecimens(errors.InvalidEvent):
    """A specimen directory has problems: nothing of it may be recorded."""

    def __init__(self, directory: Path, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in {directory}; nothing was recorded")


def load_valid(directory: Path, max_file_bytes: int = MAX_FILE_BYTES) -> list[Specimen]:
    """Every snapshot under `directory`, or `InvalidSpecimens` listing every problem."""
    found, problems = discover(directory, max_file_bytes)
    if problems:
        raise InvalidSpecimens(directory, problems)
    return found

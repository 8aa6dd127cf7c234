"""Specimens on disk: snapshots of code with their ground truth, read and validated strictly.

A specimen directory holds one folder per snapshot, `PROJECT/YYYY-MM-DD-NN/`, with:

- `code/`: the snapshot's files (paths in the ground truth are relative to it);
- `ground_truth.toml`: true positives (`[[tp]]`), known false positives (`[[fp]]`), file sets
  (`[file_sets]`) and, optionally, stated scopes (`[scopes]`). See README, "Specimens".

Validation reports every problem at once, each with its file and line, and builds nothing
when there is one: ground truth that is only partly right would make every figure wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import stat
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, get_args

import orjson

from props.core.domain import catalog
from props.core.log import errors

GROUND_TRUTH_FILE = "ground_truth.toml"
CODE_DIR = "code"
SLUG = re.compile(r"^[a-z0-9][a-z0-9_.-]*/\d{4}-\d{2}-\d{2}-\d{2}$")
SEVERITIES = set(get_args(catalog.Severity))

_TOP_KEYS = {"tp", "fp", "file_sets", "scopes"}
_TP_KEYS = {"id", "rationale", "severity", "occurrences"}
_FP_KEYS = {"id", "rationale", "relevant_files", "occurrences"}


@dataclasses.dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a specimen, where it is."""

    file: Path
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"{where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class Specimen:
    """A validated snapshot: its files (path -> bytes) and its ground truth."""

    slug: str
    root: Path
    files: dict[str, bytes]
    ground_truth: catalog.GroundTruth

    @property
    def file_entries(self) -> list[catalog.FileEntry]:
        return [catalog.FileEntry(path=p, sha256=hashlib.sha256(b).hexdigest(), size=len(b))
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


def files_hash(paths: Iterable[str]) -> str:
    """md5 (hex) of the sorted member paths, one per line: the id of a file set."""
    return hashlib.md5("\n".join(sorted(paths)).encode(), usedforsecurity=False).hexdigest()


def ground_truth_hash(gt: catalog.GroundTruth) -> str:
    """sha256 of the ground truth's canonical JSON (sorted keys): what grades cite."""
    canonical = orjson.dumps(gt.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def occurrence_id(tp_id: str, n: int) -> str:
    return f"{tp_id}#{n}"


class _Lines:
    """Approximate line numbers in a TOML text, for messages (tomllib keeps none)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def headers(self, name: str) -> list[int]:
        return [i + 1 for i, line in enumerate(self.lines) if line.strip() == f"[[{name}]]"]

    def table(self, name: str) -> int | None:
        for i, line in enumerate(self.lines):
            if line.strip() == f"[{name}]":
                return i + 1
        return None

    def find(self, token: str, start: int | None, end: int | None = None) -> int | None:
        """The first line at or after `start` (1-based) and before `end` holding `token`."""
        first = (start or 1) - 1
        last = (end - 1) if end else len(self.lines)
        for i in range(first, min(last, len(self.lines))):
            if token in self.lines[i]:
                return i + 1
        return start

    def block_end(self, start: int | None) -> int | None:
        """Where the table that starts at `start` ends (the next top-level header)."""
        if start is None:
            return None
        for i in range(start, len(self.lines)):
            line = self.lines[i].strip()
            if line.startswith("[") and not line.startswith("[[tp.") and \
                    not line.startswith("[[fp."):
                return i + 1
        return len(self.lines) + 1


class _Check:
    """Collects problems while one snapshot's ground truth is read."""

    def __init__(self, root: Path, slug: str, code: dict[str, bytes]) -> None:
        self.root = root
        self.slug = slug
        self.code = code
        self.gt_path = root / GROUND_TRUTH_FILE
        self.problems: list[Problem] = []
        self.line_counts = {p: len(b.splitlines()) for p, b in code.items()}

    def add(self, line: int | None, message: str, file: Path | None = None) -> None:
        self.problems.append(Problem(file or self.gt_path, line, message))

    def unknown_keys(self, table: dict[str, Any], allowed: set[str], where: str,
                     lines: _Lines, start: int | None, end: int | None) -> None:
        for key in sorted(set(table) - allowed):
            self.add(lines.find(key, start, end),
                     f"unknown key {key!r} in {where} (allowed: {', '.join(sorted(allowed))})")

    def text(self, item: dict[str, Any], key: str, where: str, line: int | None,
             required: bool = True) -> str | None:
        value = item.get(key)
        if value is None:
            if required:
                self.add(line, f"{where} has no {key!r}")
            return None
        if not isinstance(value, str) or not value.strip():
            self.add(line, f"{where}: {key!r} must be a non-empty string")
            return None
        return value

    def occurrences(self, item: dict[str, Any], where: str, lines: _Lines,
                    start: int | None, end: int | None) -> list[catalog.Occurrence]:
        raw = item.get("occurrences")
        if not isinstance(raw, list) or not raw:
            self.add(lines.find("occurrences", start, end),
                     f"{where} needs occurrences = [ {{ \"FILE\" = [[START, END]] }}, ... ]")
            return []
        out: list[catalog.Occurrence] = []
        for n, occ in enumerate(raw, start=1):
            line = lines.find("occurrences", start, end)
            if not isinstance(occ, dict) or not occ:
                self.add(line, f"{where}, occurrence {n}: expected {{ \"FILE\" = [[START, END]] }}")
                continue
            locations = []
            for file, ranges in occ.items():
                fline = lines.find(f'"{file}"', start, end)
                location = self.location(file, ranges, f"{where}, occurrence {n}", fline)
                if location is not None:
                    locations.append(location)
            if len(locations) == len(occ):
                out.append(catalog.Occurrence(locations=locations))
        return out

    def location(self, file: str, ranges: Any, where: str,
                 line: int | None) -> catalog.Location | None:
        if file not in self.code:
            self.add(line, f"{where}: file {file!r} does not exist in {self.slug}/{CODE_DIR}")
            return None
        if not isinstance(ranges, list) or not ranges or not all(
            isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)
            for r in ranges
        ):
            self.add(line, f"{where}: {file!r} needs a list of [START, END] line ranges")
            return None
        ok = True
        length = self.line_counts[file]
        for start, end in ranges:
            if start < 1 or end < start:
                self.add(line, f"{where}: range [{start}, {end}] in {file!r} is not a "
                               f"range (1 <= START <= END)")
                ok = False
            elif end > length:
                self.add(line, f"{where}: range [{start}, {end}] goes past the end of "
                               f"{file!r} ({length} lines)")
                ok = False
        if not ok:
            return None
        return catalog.Location(file=file, ranges=[catalog.LineRange(start=a, end=b)
                                                   for a, b in ranges])


MAX_FILE_BYTES = 1024 * 1024  # a snapshot's file over this is refused (--max-file-bytes)


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


def _read_code(code_dir: Path, max_file_bytes: int,
               problems: list[Problem]) -> dict[str, bytes]:
    """The snapshot's files, path -> bytes; what cannot be one is a problem, never read."""
    code: dict[str, bytes] = {}
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
            if name in filenames:
                size = path.stat().st_size
                if size > max_file_bytes:
                    problems.append(Problem(path, None, f"is {size:,} bytes, over the limit "
                                                        f"of {max_file_bytes:,}"))
                    continue
                code[path.relative_to(code_dir).as_posix()] = path.read_bytes()
    return dict(sorted(code.items()))


def _toml_problem(path: Path, exc: tomllib.TOMLDecodeError) -> Problem:
    match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
    return Problem(path, int(match.group(1)) if match else None, f"invalid TOML: {exc}")


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
    code = _read_code(code_dir, max_file_bytes, problems)
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
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, [_toml_problem(gt_path, exc)]
    check = _Check(root, slug, code)
    gt = _ground_truth(doc, check, _Lines(text))
    if check.problems:
        return None, check.problems
    assert gt is not None
    return Specimen(slug, root, code, gt), []


def _ground_truth(doc: dict[str, Any], check: _Check,
                  lines: _Lines) -> catalog.GroundTruth | None:
    check.unknown_keys(doc, _TOP_KEYS, "the ground truth", lines, 1, None)
    seen_ids: dict[str, int | None] = {}

    def claim_id(item_id: str | None, line: int | None) -> None:
        if item_id is None:
            return
        if item_id in seen_ids:
            check.add(line, f"duplicate id {item_id!r} (first at line {seen_ids[item_id]})")
        else:
            seen_ids[item_id] = line

    tps: list[catalog.TruePositive] = []
    for entry in _entries(doc, "tp", _TP_KEYS, check, lines, claim_id):
        severity = entry.item.get("severity")
        if severity is not None and severity not in SEVERITIES:
            check.add(lines.find("severity", entry.start, entry.end),
                      f"{entry.where}: severity {severity!r} is not one of "
                      f"{sorted(SEVERITIES)}")
            severity = None
        if entry.complete:
            tps.append(catalog.TruePositive(id=entry.ident, rationale=entry.rationale,
                                            severity=severity, occurrences=entry.occurrences))

    fps: list[catalog.FalsePositive] = []
    for entry in _entries(doc, "fp", _FP_KEYS, check, lines, claim_id):
        item, where, start, end = entry.item, entry.where, entry.start, entry.end
        occurrences = entry.occurrences
        relevant = item.get("relevant_files")
        if relevant is None:
            relevant = sorted({f for o in occurrences for f in o.files})
        elif not isinstance(relevant, list) or not all(isinstance(f, str) for f in relevant):
            check.add(lines.find("relevant_files", start, end),
                      f"{where}: relevant_files must be a list of paths")
            relevant = []
        for f in relevant:
            if f not in check.code:
                check.add(lines.find(f'"{f}"', start, end),
                          f"{where}: relevant file {f!r} does not exist in "
                          f"{check.slug}/{CODE_DIR}")
        if entry.complete:
            fps.append(catalog.FalsePositive(id=entry.ident, rationale=entry.rationale,
                                             relevant_files=sorted(relevant),
                                             occurrences=occurrences))

    file_sets = _file_sets(doc, check, lines)
    scopes = _scopes(doc, check, lines, tps, file_sets)
    if check.problems:
        return None
    return catalog.GroundTruth(true_positives=tps, false_positives=fps, file_sets=file_sets,
                               scopes=scopes)


@dataclasses.dataclass
class _Entry:
    """The fields every [[tp]] and [[fp]] table has, checked, and where it stands."""

    item: dict[str, Any]
    where: str
    start: int | None
    end: int | None
    ident: str
    rationale: str
    occurrences: list[catalog.Occurrence]

    @property
    def complete(self) -> bool:
        return bool(self.ident and self.rationale and self.occurrences)


def _entries(doc: dict[str, Any], kind: str, keys: set[str], check: _Check, lines: _Lines,
             claim_id: Any) -> Iterator[_Entry]:
    for i, (item, start) in enumerate(_items(doc, kind, lines)):
        where = f"{kind} {i + 1}"
        end = lines.block_end(start)
        if not isinstance(item, dict):
            check.add(start, f"{where} must be a table")
            continue
        ident = check.text(item, "id", where, start)
        where = f"{kind} {ident!r}" if ident else where
        check.unknown_keys(item, keys, where, lines, start, end)
        claim_id(ident, lines.find("id", start, end))
        rationale = check.text(item, "rationale", where, start)
        occurrences = check.occurrences(item, where, lines, start, end)
        yield _Entry(item, where, start, end, ident or "", rationale or "", occurrences)


def _items(doc: dict[str, Any], key: str, lines: _Lines) -> list[tuple[Any, int | None]]:
    raw = doc.get(key, [])
    items = raw if isinstance(raw, list) else [raw]
    headers = lines.headers(key)
    return [(item, headers[i] if i < len(headers) else None) for i, item in enumerate(items)]


def _file_sets(doc: dict[str, Any], check: _Check, lines: _Lines) -> list[catalog.FileSet]:
    raw = doc.get("file_sets", {})
    start = lines.table("file_sets")
    end = lines.block_end(start)
    if not isinstance(raw, dict):
        check.add(start, "[file_sets] must map a name to a list of paths")
        return []
    out: list[catalog.FileSet] = []
    hashes: dict[str, str] = {}
    for name, members in raw.items():
        line = lines.find(name, start, end)
        if not isinstance(members, list) or not members or \
                not all(isinstance(m, str) for m in members):
            check.add(line, f"file set {name!r} must be a non-empty list of paths")
            continue
        missing = [m for m in members if m not in check.code]
        for m in missing:
            check.add(line, f"file set {name!r}: file {m!r} does not exist in "
                            f"{check.slug}/{CODE_DIR}")
        if len(set(members)) != len(members):
            check.add(line, f"file set {name!r} lists a file twice")
        digest = files_hash(members)
        if digest in hashes:
            check.add(line, f"file set {name!r} has the same files as {hashes[digest]!r}")
        hashes[digest] = name
        if not missing:
            out.append(catalog.FileSet(name=name, files=sorted(set(members)), files_hash=digest))
    return out


def _scopes(doc: dict[str, Any], check: _Check, lines: _Lines,
            tps: list[catalog.TruePositive],
            file_sets: list[catalog.FileSet]) -> list[catalog.Scope]:
    """Each file set's scope: computed from the occurrences' files, unless stated."""
    occurrences = {occurrence_id(tp.id, n): occ for tp in tps
                   for n, occ in enumerate(tp.occurrences, start=1)}
    stated = doc.get("scopes", {})
    start = lines.table("scopes")
    end = lines.block_end(start)
    by_name = {fs.name: fs for fs in file_sets}
    if not isinstance(stated, dict):
        check.add(start, "[scopes] must map a file set name to a list of occurrence ids")
        stated = {}
    for name in stated:
        if name not in by_name:
            check.add(lines.find(name, start, end), f"scope for unknown file set {name!r}")
    scopes = [catalog.Scope(files_hash=None, occurrences=sorted(occurrences))]
    for fs in file_sets:
        members = set(fs.files)
        if fs.name in stated:
            line = lines.find(fs.name, start, end)
            claimed = stated[fs.name]
            if not isinstance(claimed, list) or not all(isinstance(c, str) for c in claimed):
                check.add(line, f"scope {fs.name!r} must be a list of occurrence ids "
                                f"(\"TP_ID#N\")")
                continue
            for occ_id in claimed:
                occ = occurrences.get(occ_id)
                if occ is None:
                    check.add(line, f"scope {fs.name!r}: no occurrence {occ_id!r} "
                                    f"(ids are \"TP_ID#N\", N from 1)")
                elif not occ.files <= members:
                    outside = sorted(occ.files - members)
                    check.add(line, f"scope {fs.name!r} claims {occ_id!r}, which lies outside "
                                    f"the file set (in {', '.join(outside)})")
            chosen = sorted(claimed)
        else:
            chosen = sorted(i for i, occ in occurrences.items() if occ.files <= members)
        scopes.append(catalog.Scope(files_hash=fs.files_hash, occurrences=chosen))
    return scopes


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

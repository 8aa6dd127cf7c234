"""The format of a snapshot folder: its layout (`code/`, `ground_truth.toml`) and the ground
truth file's rules, read and checked: every problem found with the line it is on (an author
fixes them all in one pass)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, get_args

import pydantic

from props.core.domain import catalog

GROUND_TRUTH_FILE = "ground_truth.toml"
CODE_DIR = "code"
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
        counted: dict[bytes, int] = {}  # (each distinct content split once)
        for b in code.values():
            if b not in counted:
                counted[b] = len(b.splitlines())
        self.line_counts = {p: counted[b] for p, b in code.items()}

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


def _toml_problem(path: Path, exc: tomllib.TOMLDecodeError) -> Problem:
    match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
    return Problem(path, int(match.group(1)) if match else None, f"invalid TOML: {exc}")


def files_hash(paths: Iterable[str]) -> str:
    """md5 (hex) of the sorted member paths, one per line: the id of a file set."""
    return hashlib.md5("\n".join(sorted(paths)).encode(), usedforsecurity=False).hexdigest()


def occurrence_id(tp_id: str, n: int) -> str:
    return f"{tp_id}#{n}"




def parse(path: Path, text: str, root: Path, slug: str, code: dict[str, bytes]
          ) -> tuple[catalog.GroundTruth | None, list[Problem]]:
    """The ground truth `text` (the file at `path`) states about the snapshot `slug` whose
    files are `code`, or None and every problem."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return None, [_toml_problem(path, exc)]
    except RecursionError:  # (tomllib recurses: arrays nested some thousands deep)
        return None, [Problem(path, None, "invalid TOML: nested too deeply")]
    check = _Check(root, slug, code)
    try:
        gt = _ground_truth(doc, check, _Lines(text))
    except pydantic.ValidationError as exc:  # (a bound of the catalog: 101 files in one
        # occurrence, say, which a fix of one blob at many paths gives; never a traceback)
        return None, [Problem(path, None, f"past a bound of the ground truth: "
                                          f"{'.'.join(map(str, e['loc'])) or 'value'}: "
                                          f"{e['msg']}") for e in exc.errors()]
    if check.problems:
        return None, check.problems
    assert gt is not None
    return gt, []


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


_TODO = re.compile(r"#\s*TODO\b")


def todo_problems(directory: Path) -> list[str]:
    """Each TODO comment left in a ground truth under `directory`: a key nobody checked.
    What `validate` and `sync` refuse, and what the commands that write keys count."""
    out = []
    for path in sorted(directory.rglob(GROUND_TRUTH_FILE)):
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                 .splitlines(), 1):
            if _TODO.search(line):
                out.append(f"{path}:{n}: a TODO is left: check it and remove the comment "
                           f"(--allow-todo accepts a draft)")
    return out

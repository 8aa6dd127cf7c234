"""Writing a key made from fixes: the ground_truth.toml of the defects found (every name
quoted, every comment one line, so a file name cannot write TOML of its own), the file sets
a reviewer would open, and the snapshot folder."""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

from props.core.domain.catalog.parts import MAX_RATIONALE
from props.core.domain.specimens import git_trees, specimen_format, specimens
from props.core.domain.specimens.specimens_from_fixes import Defect, defect_filter, listed, quoted
from props.core.log import errors


def _comment(text: str) -> str:
    """`text` as the rest of one comment line: a newline (or any control character) in a name
    or a commit's subject would end the comment and write TOML of its own."""
    return " ".join("".join(" " if unicodedata.category(c) == "Cc" else c
                            for c in text).split())


def ground_truth(found: list[Defect], snapshot: dict[str, str], made_by: str) -> str:
    """The ground_truth.toml of `found` on `snapshot` (its files' text, by path)."""
    made_by = _comment(made_by)
    out = [f"# Made by {made_by}: each fix's hunks on the code before it.",
           "# Check every TODO before `props specimens sync`: a person decides what the "
           "defect is.", ""]
    sets: dict[str, list[str]] = {}
    for d in found:
        out += [f"# TODO: {_comment(t)}" for t in d.todo]
        out += [f"# note: the fix also changes {quoted(path)} at {listed(ranges)} ({why})"
                for path, notes in sorted(d.notes.items()) for ranges, why in notes]
        if not d.ranges:
            out += [f"# (fix {d.name} left out: no line to point at)", ""]
            continue
        locations = ", ".join(f"{quoted(path)} = {listed(ranges)}"
                              for path, ranges in sorted(d.ranges.items()))
        rationale = d.message.strip() or d.name
        if len(rationale) > MAX_RATIONALE:  # (a problem statement may be a whole essay)
            rationale = rationale[:MAX_RATIONALE - 1].rsplit(None, 1)[0] + "…"
            out.append(f"# TODO: the rationale was cut to {MAX_RATIONALE:,} characters")
        out += ["[[tp]]", f"id = {quoted(d.name)}",
                'severity = "medium"  # TODO: how severe is it?',
                f"rationale = {quoted(rationale)}  "
                "# TODO: say what the defect is, not how it was fixed",
                "occurrences = [", f"  {{ {locations} }},", "]", ""]
        sets[d.name] = _neighbourhood(sorted(d.ranges), snapshot, d.tests)
    if sets:
        out += ["[file_sets]  # each fix's files, the others of their package, and the "
                "tests that import them"]
        seen: dict[tuple[str, ...], str] = {}
        for name, members in sets.items():
            first = seen.setdefault(tuple(members), name)
            out.append(f"{quoted(name)} = {json.dumps(members)}" if first == name
                       else f"# {name}: the same files as {first}")
    return "\n".join(out) + "\n"


_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+\(?([\w, \t]+)"
                     r"|import[ \t]+([\w., \t]+))", re.MULTILINE)


def _imported(text: str) -> set[str]:
    """The modules a Python file imports, in every form: `import a.b, c as d`, `from a import
    b` (a, and a.b: b may be a module)."""
    found: set[str] = set()
    for m in _IMPORT.finditer(text):
        if m[1]:
            found.add(m[1])
            found |= {f"{m[1]}.{n.split()[0]}" for n in m[2].split(",") if n.strip()}
        else:
            found |= {n.split()[0] for n in m[3].split(",") if n.strip()}
    return found


def _packages(path: str, snapshot: dict[str, str]) -> set[str]:
    """The names a test imports a touched file by: its outermost package (the folders above
    it that hold an `__init__.py`); outside any package, each name its path could be
    imported as from some root (`src/calc/core.py`: src, calc or core)."""
    parts = Path(path).with_suffix("").parts
    top = len(parts) - 1
    while top > 0 and "/".join((*parts[:top], "__init__.py")) in snapshot:
        top -= 1
    return {parts[top]} if top < len(parts) - 1 else set(parts)


def _neighbourhood(touched: list[str], snapshot: dict[str, str], tests: list[str]) -> list[str]:
    """The touched files, the others in their folders (their package), the test files that
    import a touched file's package in any form (`import pkg`, `from pkg import x`,
    `from pkg.mod import y`: the fix's test often imports what the package re-exports), and
    `tests`, the dataset's own: what a reviewer of the fix would open."""
    folders = {str(Path(p).parent) for p in touched}
    packages = {n for p in touched if p.endswith(".py") for n in _packages(p, snapshot)}
    is_source = defect_filter(None)
    imports: dict[str, set[str]] = {}  # (each distinct text read once, at any number of paths)

    def tests_it(path: str, text: str) -> bool:
        if is_source(path) or not path.endswith(".py"):
            return False
        if text not in imports:
            imports[text] = {i.split(".")[0] for i in _imported(text)}
        return not imports[text].isdisjoint(packages)

    return sorted(p for p, text in snapshot.items()
                  if str(Path(p).parent) in folders or p in tests or tests_it(p, text))


def write(out: Path, slug: str, snapshot: dict[str, str], found: list[Defect],
          made_by: str) -> Path:
    """Write the snapshot folder OUT/SLUG/ (code/ and ground_truth.toml); refuse to write over
    one that is there. Each distinct text is encoded and written once, and hard-linked at
    every other path that holds it (a repository may hold one blob at a thousand paths: the
    folder holds it once, and the snapshot reads back the same)."""
    if not specimens.SLUG.match(slug):
        raise errors.InvalidEvent(f"{slug!r} is not PROJECT/YYYY-MM-DD-NN (lowercase project)")
    root = out / slug
    if root.exists():
        raise errors.ConfigurationError(f"{root} exists already: choose another -o or slug")
    code = (root / specimen_format.CODE_DIR).resolve()
    targets = []
    for path, text in snapshot.items():
        target = (code / git_trees.checked_path(path)).resolve()
        if not target.is_relative_to(code):  # (a symlinked folder under -o, say)
            raise errors.InvalidEvent(f"{path!r} would be written outside {code}: nothing "
                                      f"was written")
        targets.append((target, text))
    written: dict[str, Path] = {}  # each distinct text -> the file the others link to
    for target, text in targets:  # every path checked before the first is written
        target.parent.mkdir(parents=True, exist_ok=True)
        first = written.get(text)
        if first is None or not _linked(first, target):
            target.unlink(missing_ok=True)  # (never write through a link of another path)
            target.write_text(text, encoding="utf-8")
            written[text] = target
    (root / specimen_format.GROUND_TRUTH_FILE).write_text(
        ground_truth(found, snapshot, made_by), encoding="utf-8")
    return root


def _linked(first: Path, target: Path) -> bool:
    """Whether `target` is now a hard link of `first`; if not (a file system without hard
    links, or `first` at its most links), the caller writes a copy, the next link source."""
    try:
        os.link(first, target)
    except OSError:
        return False
    return True

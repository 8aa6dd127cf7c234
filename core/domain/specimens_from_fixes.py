"""Specimens made from bug fixes: the code before the fixes, and the fixes' lines as defects.

Each fix is a change from a buggy version of some files to a fixed one (a commit of a git
repository, or two folders). Its hunks are mapped onto the buggy version's lines: the lines it
deletes or changes, and for a pure insertion the lines around where it goes (marked TODO: a
person checks them). With several fixes from one repository, the snapshot is the code before
the oldest, and a later fix's lines are carried back onto it through the commits between
(lines that did not exist yet are left out, marked TODO). Each fix becomes one true positive
whose one occurrence holds all its hunks, with the commit message as rationale (TODO: say
what the defect is), and a file set of the files it touches and their neighbours.
`props specimens validate` passes on what this writes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

from props.core.domain import git_trees, line_diffs, specimen_format, specimens, vocabulary
from props.core.domain.catalog.parts import MAX_RATIONALE
from props.core.log import errors

Range = tuple[int, int]  # 1-based, inclusive

# Where a fix's hunks are not the defect by default: the test it adds, its docs, CI. They are
# kept as notes in the key (a person may still point at them), never as occurrences: a critic
# commenting on the new test's lines would be counted as finding the bug.
NOT_DEFECTS = ("tests/**", "test/**", "**/tests/**", "**/test/**", "**/test_*.py",
               "**/*_test.py", "**/conftest.py", "docs/**", "doc/**", "**/*.md", "**/*.rst",
               "**/*.txt", ".github/**", ".gitlab-ci.yml", ".circleci/**", "CHANGELOG*",
               "CHANGES*", "HISTORY*", "NEWS*",
               # release-note fragments (reno, towncrier): what changed, told to users
               "releasenotes/**", "changelog.d/**", "newsfragments/**", "changes/**",
               # packaging and metadata: who wrote it, what ships, how it is tested (a range
               # of 26 commits brought AUTHORS, MANIFEST.in and tox.ini into a key)
               "AUTHORS*", "**/AUTHORS*", "CONTRIBUTORS*", "**/CONTRIBUTORS*", "LICENSE*",
               "COPYING*", "MANIFEST.in", "tox.ini", "setup.cfg", ".gitignore",
               ".gitattributes", ".coveragerc", ".editorconfig", ".pre-commit-config.yaml")
# A line that only states the project's version (setup.py, pyproject.toml, __init__.py): a
# release bump, never the defect. A hunk of nothing else is a note.
_VERSION = re.compile(r"""^\s*(?:__version__|__version_info__|version_info|version|VERSION)"""
                      r"""\s*[:=]\s*(?:(['"])[\w.+!-]*\1|\([\w\s,.'"]*\))\s*,?\s*(?:\#.*)?$""")
# Trailers git and review tools add to a commit message: not what the defect is.
_TRAILER = re.compile(r"^[A-Za-z][A-Za-z-]*-by:\s|^(Change-Id|Fixes|Closes|Refs):\s")


def defect_filter(defect_paths: list[str] | None) -> Callable[[str], bool]:
    """Whether a path's hunks may be defect locations: those `defect_paths` match, or by
    default every path NOT_DEFECTS does not."""
    if defect_paths:
        return lambda path: any(git_trees.glob(path, g) for g in defect_paths)
    return lambda path: not any(git_trees.glob(path, g) for g in NOT_DEFECTS)


def without_trailers(message: str) -> str:
    """The message without its `Co-authored-by:`, `Signed-off-by:`, ... lines, wherever they
    stand (a squash merge keeps each squashed commit's trailers inside the body, and ends
    it with a rule of dashes), and without the blank lines they leave."""
    lines = [line for line in message.rstrip().splitlines() if not _TRAILER.match(line)]
    while lines and (not lines[-1].strip() or set(lines[-1].strip()) == {"-"}):
        lines.pop()
    kept: list[str] = []
    for line in lines:
        if line.strip() or (kept and kept[-1].strip()):
            kept.append(line)
    return "\n".join(kept)


@dataclasses.dataclass(frozen=True)
class Fix:
    """One fix: `before` and `after` of the files it touched, by their path before it (an
    added file has no `before`; a deleted one has `after` None)."""

    name: str
    message: str
    before: dict[str, str]
    after: dict[str, str | None]


@dataclasses.dataclass
class Defect:
    name: str
    message: str
    ranges: dict[str, list[Range]]  # snapshot path -> its lines
    todo: list[str]
    # Lines the fix changes that are not defect locations, by path: (ranges, why not).
    notes: dict[str, list[tuple[list[Range], str]]] = dataclasses.field(default_factory=dict)
    tests: list[str] = dataclasses.field(default_factory=list)  # the dataset's own tests

    def note(self, path: str, ranges: list[Range], why: str) -> None:
        if ranges:
            self.notes.setdefault(path, []).append((ranges, why))


NOT_A_DEFECT_PATH = "tests, docs, CI, packaging or metadata: not a defect location unless " \
                    "--defect-paths says so"


@dataclasses.dataclass
class Changed:
    """The lines of a file's `before` that a change touches, by what they are."""

    code: list[Range] = dataclasses.field(default_factory=list)  # deleted, replaced, or
    # around a pure insertion
    whitespace: list[Range] = dataclasses.field(default_factory=list)  # only spacing changed
    version: list[Range] = dataclasses.field(default_factory=list)  # only a version line
    guessed: bool = False  # some code range came from an insertion


def _spacing_only(h: line_diffs.Hunk) -> bool:
    """Whether the hunk changes nothing but spacing: blank lines, or runs of spaces between
    the same words with the same indentation (indentation is code in Python)."""
    def words(side: tuple[str, ...]) -> list[tuple[str, list[str]]]:
        return [(line[:len(line) - len(line.lstrip())], line.split()) for line in side
                if line.strip()]
    return words(h.old) == words(h.new)


def _version_only(h: line_diffs.Hunk) -> bool:
    changed = [line for line in (*h.old, *h.new) if line.strip()]
    return bool(changed) and all(_VERSION.match(line) for line in changed)


def changed_lines(before: str, after: str) -> Changed:
    """The lines of `before` a change deletes or replaces, by git's diff; for a pure
    insertion, the lines on both sides of where it goes. Hunks of spacing only, or of
    version lines only, are set apart."""
    length = len(line_diffs.lines(before))
    out = Changed()
    for h in line_diffs.hunks(before, after):
        if h.old_count:
            where = (h.old_start, h.old_start + h.old_count - 1)
        elif length:  # an insertion after line old_start (0: at the top)
            where = (max(1, h.old_start), min(length, h.old_start + 1))
        else:
            continue
        if _spacing_only(h):
            out.whitespace.append(where)
        elif _version_only(h):
            out.version.append(where)
        else:
            out.code.append(where)
            out.guessed |= not h.old_count
    out.code, out.whitespace, out.version = (_merged(r) for r in (out.code, out.whitespace,
                                                                 out.version))
    return out


def _merged(ranges: list[Range]) -> list[Range]:
    out: list[Range] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def carried_back(ranges: list[Range], later: str, snapshot: str) -> tuple[list[Range], bool]:
    """`ranges` of the `later` version of a file, on the `snapshot` version's lines: each line
    that the two share goes to its place; the flag says whether some line had no place."""
    place = line_diffs.placed(later, snapshot)
    wanted = [place.get(n) for start, end in ranges for n in range(start, end + 1)]
    kept = [n for n in wanted if n is not None]
    return _merged([(n, n) for n in kept]), len(kept) < len(wanted)


def defects(snapshot: dict[str, str], fixes: list[Fix],
            renamed: list[dict[str, str]] | None = None,
            is_defect: Callable[[str], bool] | None = None) -> list[Defect]:
    """Each fix's defect on `snapshot`'s files; `renamed[i]` maps the paths fix i found back
    to the snapshot's (files renamed in between). Hunks in paths `is_defect` refuses (by
    default: tests, docs, CI, packaging), and hunks of version lines or spacing only, are
    notes, not occurrences (spacing with a TODO: in some code it is the defect)."""
    is_defect = is_defect or defect_filter(None)
    found: list[Defect] = []
    for i, fix in enumerate(fixes):
        d = Defect(_ident(fix.name, [f.name for f in found]), without_trailers(fix.message),
                   {}, [])
        for path in sorted(set(fix.before) | set(fix.after)):
            _one_file(d, fix, path, (renamed[i] if renamed else {}).get(path, path), snapshot,
                      is_defect)
        if not d.ranges:
            d.todo.append("no source line of the snapshot shows this fix (only tests, docs "
                          "or CI, or lines that came after it): not written as a true "
                          "positive; give the occurrence yourself, or leave the fix out")
        found.append(d)
    return found


def _one_file(d: Defect, fix: Fix, path: str, home: str, snapshot: dict[str, str],
              is_defect: Callable[[str], bool]) -> None:
    """What the fix's change of `path` (`home` in the snapshot) adds to `d`."""
    if path not in fix.before:
        if is_defect(path):  # (a new test or release note is no question to ask)
            d.todo.append(f"the fix adds {_quoted(path)}: no line of the snapshot shows it")
        return
    after = fix.after.get(path)
    if after is None:  # deleted: every line of it was the defect
        changed = Changed(code=[(1, max(1, len(line_diffs.lines(fix.before[path]))))])
    else:
        changed = changed_lines(fix.before[path], after)
    if home not in snapshot:
        d.todo.append(f"{_quoted(path)} is not in the snapshot: check where the defect is")
        return
    lost = False
    if fix.before[path] != snapshot[home]:
        carried = [carried_back(r, fix.before[path], snapshot[home])
                   for r in (changed.code, changed.whitespace, changed.version)]
        changed.code, changed.whitespace, changed.version = (r for r, _ in carried)
        lost = carried[0][1]
    if not is_defect(home):  # a note for a person, never a question: no TODO
        d.note(home, _merged([*changed.code, *changed.whitespace, *changed.version]),
               NOT_A_DEFECT_PATH)
        return
    d.note(home, changed.version, "only a version line: a release, not a defect location")
    if changed.whitespace:
        d.note(home, changed.whitespace, "only spacing changes: not a defect location")
        d.todo.append(f"{_quoted(home)}: the fix changes only spacing at "
                      f"{_listed(changed.whitespace)}; written as a note: make it an "
                      f"occurrence if the spacing is the defect")
    if lost:
        d.todo.append(f"{_quoted(home)}: lines the fix changes came after the snapshot; "
                      "only those it had are kept")
    if changed.guessed:
        d.todo.append(f"{_quoted(home)}: the fix inserts lines; the lines around the "
                      "insertion are marked")
    if changed.code:
        d.ranges[home] = changed.code


def _quoted(path: str) -> str:
    """A path as a key's comment shows it: quoted like a TOML string, whatever it holds."""
    return _toml_string(path)


def _listed(ranges: list[Range]) -> str:
    return json.dumps([list(r) for r in ranges])


def _ident(name: str, taken: list[str], most: int = 60) -> str:
    """A readable id of whole words (never cut inside a word or number), unique in `taken`."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    kept: list[str] = []
    for word in words:
        if kept and len("-".join([*kept, word])) > most:
            break
        kept.append(word)
    base = "-".join(kept)[:most] if kept else "fix"
    ident, n = base, 1
    while ident in taken:
        n += 1
        ident = f"{base}-{n}"
    return ident


def _comment(text: str) -> str:
    """`text` as the rest of one comment line: a newline (or any control character) in a name
    or a commit's subject would end the comment and write TOML of its own."""
    return " ".join("".join(" " if unicodedata.category(c) == "Cc" else c
                            for c in text).split())


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def ground_truth(found: list[Defect], snapshot: dict[str, str], made_by: str) -> str:
    """The ground_truth.toml of `found` on `snapshot` (its files' text, by path)."""
    made_by = _comment(made_by)
    out = [f"# Made by {made_by}: each fix's hunks on the code before it.",
           "# Check every TODO before `props specimens sync`: a person decides what the "
           "defect is.", ""]
    sets: dict[str, list[str]] = {}
    for d in found:
        out += [f"# TODO: {_comment(t)}" for t in d.todo]
        out += [f"# note: the fix also changes {_quoted(path)} at {_listed(ranges)} ({why})"
                for path, notes in sorted(d.notes.items()) for ranges, why in notes]
        if not d.ranges:
            out += [f"# (fix {d.name} left out: no line to point at)", ""]
            continue
        locations = ", ".join(f"{_toml_string(path)} = {_listed(ranges)}"
                              for path, ranges in sorted(d.ranges.items()))
        rationale = d.message.strip() or d.name
        if len(rationale) > MAX_RATIONALE:  # (a problem statement may be a whole essay)
            rationale = rationale[:MAX_RATIONALE - 1].rsplit(None, 1)[0] + "…"
            out.append(f"# TODO: the rationale was cut to {MAX_RATIONALE:,} characters")
        out += ["[[tp]]", f"id = {_toml_string(d.name)}",
                'severity = "medium"  # TODO: how severe is it?',
                f"rationale = {_toml_string(rationale)}  "
                "# TODO: say what the defect is, not how it was fixed",
                "occurrences = [", f"  {{ {locations} }},", "]", ""]
        sets[d.name] = _neighbourhood(sorted(d.ranges), snapshot, d.tests)
    if sets:
        out += ["[file_sets]  # each fix's files, the others of their package, and the "
                "tests that import them"]
        seen: dict[tuple[str, ...], str] = {}
        for name, members in sets.items():
            first = seen.setdefault(tuple(members), name)
            out.append(f"{_toml_string(name)} = {json.dumps(members)}" if first == name
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

    def tests_it(path: str, text: str) -> bool:
        return not is_source(path) and path.endswith(".py") and any(
            i.split(".")[0] in packages for i in _imported(text))

    return sorted(p for p, text in snapshot.items()
                  if str(Path(p).parent) in folders or p in tests or tests_it(p, text))


def write(out: Path, slug: str, snapshot: dict[str, str], found: list[Defect],
          made_by: str) -> Path:
    """Write the snapshot folder OUT/SLUG/ (code/ and ground_truth.toml); refuse to write over
    one that is there."""
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
    for target, text in targets:  # every path checked before the first is written
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    (root / specimen_format.GROUND_TRUTH_FILE).write_text(
        ground_truth(found, snapshot, made_by), encoding="utf-8")
    return root


# -- git ----------------------------------------------------------------------------------------


def from_git(repo: Path, commits: list[str], skipped: list[str] | None = None,
             is_defect: Callable[[str], bool] | None = None,
             keep: Callable[[str], bool] | None = None,
             ) -> tuple[dict[str, str], list[Defect], str]:
    """The snapshot before the oldest of `commits` (fixes), their defects on it, and the
    snapshot's commit; the files it leaves out are added to `skipped`."""
    wanted = {git_trees.git(repo, "rev-parse", "--verify", f"{c}^{{commit}}").decode().strip()
              for c in commits}
    history = git_trees.git(repo, "rev-list", "--topo-order", "--reverse", *wanted).decode().split()
    ordered = [c for c in history if c in wanted]  # oldest first, whatever the dates
    base = git_trees.git(repo, "rev-parse", f"{ordered[0]}^").decode().strip()
    snapshot = git_trees.tree(repo, base, skipped, keep)
    fixes, renamed = [], []
    for commit in ordered:
        message = git_trees.git(repo, "log", "-1", "--format=%B", commit).decode()
        subject = message.splitlines()[0] if message.strip() else commit[:12]
        fixes.append(fix_between(repo, f"{commit}^", commit, subject, message))
        renamed.append({new: old for kind, old, new in git_trees.changes(repo, base, f"{commit}^")
                        if kind == "R"})
    return snapshot, defects(snapshot, fixes, renamed, is_defect), base


def fix_between(repo: Path, old_tree: str, new_tree: str, name: str, message: str) -> Fix:
    """The fix that turns `old_tree` into `new_tree` (commits or trees of `repo`), its files
    read one at a time."""
    before: dict[str, str] = {}
    after: dict[str, str | None] = {}
    with git_trees.Blobs(repo) as blobs:
        for kind, old, new in git_trees.changes(repo, old_tree, new_tree):
            if kind != "A":
                text = blobs.text(f"{old_tree}:{old}")
                if text is None:
                    continue
                before[old] = text
            after[old] = None if kind == "D" else blobs.text(f"{new_tree}:{new}")
    return Fix(name, message, before, after)


def read_folder(root: Path, keep: Callable[[str], bool] | None = None) -> dict[str, str]:
    """Every file under `root` that can be a snapshot file and `keep` takes, by path relative
    to it: read by the snapshots' own rules (no symlink, device or oversized file is read),
    git's folder left out."""
    keep = keep or git_trees.snapshot_filter()
    refused: list[specimen_format.Problem] = []  # what cannot be in a snapshot stays out of it
    found = specimens.read_code(root, vocabulary.MAX_SPECIMEN_FILE_BYTES, refused)
    return {path: text for path, data in found.items()
            if ".git" not in Path(path).parts and keep(path)
            and (text := git_trees.readable(data)) is not None}


def from_folders(buggy: Path, fixed: Path, name: str, message: str,
                 is_defect: Callable[[str], bool] | None = None,
                 keep: Callable[[str], bool] | None = None,
                 ) -> tuple[dict[str, str], list[Defect]]:
    """The snapshot `buggy` and the defect that turning it into `fixed` fixes."""
    snapshot, after = read_folder(buggy, keep), read_folder(fixed, keep)
    changed = {p for p in snapshot.keys() | after.keys() if snapshot.get(p) != after.get(p)}
    fix = Fix(name, message, {p: snapshot[p] for p in changed if p in snapshot},
              {p: after.get(p) for p in changed})
    return snapshot, defects(snapshot, [fix], None, is_defect)

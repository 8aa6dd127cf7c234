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
from collections.abc import Callable
from pathlib import Path

from props.core.domain import vocabulary
from props.core.domain.specimens import git_trees, line_diffs, specimen_format, specimens

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
            d.todo.append(f"the fix adds {quoted(path)}: no line of the snapshot shows it")
        return
    after = fix.after.get(path)
    if after is None:  # deleted: every line of it was the defect
        changed = Changed(code=[(1, max(1, len(line_diffs.lines(fix.before[path]))))])
    else:
        changed = changed_lines(fix.before[path], after)
    if home not in snapshot:
        d.todo.append(f"{quoted(path)} is not in the snapshot: check where the defect is")
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
        d.todo.append(f"{quoted(home)}: the fix changes only spacing at "
                      f"{listed(changed.whitespace)}; written as a note: make it an "
                      f"occurrence if the spacing is the defect")
    if lost:
        d.todo.append(f"{quoted(home)}: lines the fix changes came after the snapshot; "
                      "only those it had are kept")
    if changed.guessed:
        d.todo.append(f"{quoted(home)}: the fix inserts lines; the lines around the "
                      "insertion are marked")
    if changed.code:
        d.ranges[home] = changed.code


# What json.dumps leaves raw but a key may not hold raw: DEL (TOML refuses it in a string
# and in a comment, so the whole key would not read) and the C1 controls (invisible, and
# some terminals act on them).
_RAW_CONTROLS = re.compile("[\x7f-\x9f]")


def quoted(path: str) -> str:
    """A path (or any name) as a key shows it: a JSON string is a TOML basic string, whatever
    it holds, once every control character is escaped (json.dumps escapes only 0x00-0x1f)."""
    return _RAW_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}",
                             json.dumps(path, ensure_ascii=False))


def listed(ranges: list[Range]) -> str:
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
    to it: read by the snapshots' own rules (no symlink, device or oversized file is read;
    past vocabulary.MAX_SNAPSHOT_BYTES of distinct content, SnapshotTooLarge), git's folder
    left out."""
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

"""Answer keys from the bug datasets people already have: BugsInPy and SWE-bench-style JSONL.

Each bug becomes one snapshot, made as `props specimens from-git` makes one: the code at the
buggy commit (BugsInPy's `buggy_commit_id`, SWE-bench's `base_commit`), and one true
positive, the fix's hunks on that code in source files only (BugsInPy: its `bug_patch.txt`
applied onto the base, the dataset's own fix, and only without one the diff to
`fixed_commit_id`, which can span many commits: a range of more than one is listed in a TODO;
SWE-bench: its `patch` applied onto the base; a `test_patch` is never ground truth). The
problem statement (or the fix commit's message) is the rationale, with a TODO asking a
person to review it, so `validate` refuses the key until one has. A bug whose repository
or commit is not here, or whose fix touches no source line of the snapshot, is listed
with the reason and nothing of it is written.

REPOS is a folder of local clones named as the dataset names them: BugsInPy's project
(`REPOS/youtube-dl`), SWE-bench's `owner/name` (`REPOS/owner/name`, `REPOS/owner__name` or
`REPOS/name`). A clone is a folder that is its repository's top level: `REPOS/tqdm/tqdm` inside
a clone at `REPOS/tqdm` is tqdm's package folder, not a clone.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from props.core.domain.specimens import fix_keys, git_trees, specimens_from_fixes
from props.core.log import errors

_FIELD = re.compile(r'^\s*([a-z_]+)\s*=\s*"?(.*?)"?\s*$')
# What a dataset's values may be before they reach git or a file: a bug id is a name (it
# goes into the key's header and the made-before check), a commit is hex (never an option),
# a SWE-bench repo is OWNER/NAME (never a path out of --repos).
_BUG_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{4,64}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
MAX_LINE_BYTES = 64 * 2**20  # one SWE-bench instance (its patches and statement) at most
MAX_PATCH_BYTES = 16 * 2**20  # one BugsInPy bug_patch.txt at most
MAX_LISTED_COMMITS = 30  # the commits of a range a TODO names (then how many more)


@dataclasses.dataclass(frozen=True)
class Bug:
    id: str
    project: str  # the snapshot's project name (its slug's first part)
    repo: Path | None  # None: no clone of it under REPOS
    base: str  # the buggy commit
    fixed: str | None  # the fixed commit (BugsInPy)
    patch: str | None  # the fix as a patch onto base (SWE-bench, BugsInPy's bug_patch.txt)
    rationale: str
    tests: tuple[str, ...] = ()  # the dataset's tests of the fix (BugsInPy's test_file)


@dataclasses.dataclass
class Made:
    written: list[tuple[str, Path, int]] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def _project(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "project"


def _clone(repos: Path, *names: str) -> Path | None:
    """The first of REPOS/NAME... that is a clone's top level (never a folder inside one)."""
    return next((c for name in names if (c := git_trees.top_level(repos / name))), None)


def _patch(folder: Path) -> str | None:
    """A bug's `bug_patch.txt`, if it has one (bounded, read before any git runs)."""
    file = folder / "bug_patch.txt"
    if not file.is_file():
        return None
    with file.open("rb") as f:
        data = f.read(MAX_PATCH_BYTES + 1)
    if len(data) > MAX_PATCH_BYTES:
        raise errors.InvalidEvent(f"{file}: over {MAX_PATCH_BYTES:,} bytes")
    return data.decode("utf-8", "replace")


def bugsinpy(folder: Path, repos: Path) -> Iterator[Bug]:
    """Every bug of a BugsInPy checkout (`projects/NAME/bugs/N/bug.info`), in order."""
    infos = sorted(folder.glob("projects/*/bugs/*/bug.info"),
                   key=lambda p: (p.parents[2].name, int(p.parent.name)
                                  if p.parent.name.isdigit() else 0, p.parent.name))
    if not infos:
        raise errors.ConfigurationError(f"{folder} holds no projects/NAME/bugs/N/bug.info: "
                                        f"not a BugsInPy checkout")
    for info in infos:
        name = info.parents[2].name
        fields = {m[1]: m[2] for line in info.read_text(errors="replace").splitlines()
                  if (m := _FIELD.match(line))}
        tests = tuple(t.strip() for t in fields.get("test_file", "").split(";") if t.strip())
        yield Bug(f"{name}-{info.parent.name}", _project(name), _clone(repos, name),
                  fields.get("buggy_commit_id", ""), fields.get("fixed_commit_id", ""),
                  _patch(info.parent), f"BugsInPy {name} bug {info.parent.name}", tests)


def swebench(file: Path, repos: Path) -> Iterator[Bug]:
    """Every instance of a SWE-bench-style JSONL file, in its order."""
    with file.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            if len(raw) > MAX_LINE_BYTES:
                raise errors.InvalidEvent(f"{file}:{number}: a line over {MAX_LINE_BYTES:,} "
                                          f"bytes")
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw)
                owner_name = str(doc["repo"])
                bug = (str(doc["instance_id"]), str(doc["base_commit"]), str(doc["patch"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise errors.InvalidEvent(f"{file}:{number}: not a SWE-bench instance "
                                          f"(instance_id, repo, base_commit, patch): {exc}"
                                          ) from None
            owner, _, name = owner_name.partition("/")
            found = _clone(repos, owner_name, f"{owner}__{name}", name) \
                if _REPO.match(owner_name) and ".." not in owner_name.split("/") else None
            yield Bug(bug[0], _project(name or owner), found, bug[1], None, bug[2],
                      str(doc.get("problem_statement") or bug[0]))


def _applied(repo: Path, base: str, patch: str) -> str:
    """The tree `patch` makes of `base` (in a temporary index: the clone's checkout and
    branches are not touched; the tree's objects are written to its object store)."""
    with tempfile.TemporaryDirectory(prefix="props-dataset-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git_trees.git(repo, "read-tree", base, env=env)
        git_trees.git(repo, "apply", "--cached", "--whitespace=nowarn", "-",
                      given=patch.encode(), env=env)
        return git_trees.git(repo, "write-tree", env=env).decode().strip()


def _slug(out: Path, bug: Bug, repo: Path) -> tuple[str, bool]:
    """PROJECT/DAY-NN for the bug (DAY: its base commit's), and whether `out` holds it
    already (a second run writes nothing twice)."""
    day = git_trees.git(repo, "log", "-1", "--format=%cs", bug.base).decode().strip()
    for n in range(100):
        slug = f"{bug.project}/{day}-{n:02d}"
        key = out / slug / "ground_truth.toml"
        if not key.exists():
            return slug, False
        if f" {bug.id} at " in key.read_text(errors="replace"):
            return slug, True
    raise errors.InvalidEvent(f"{bug.project} has 100 snapshots of {day} in {out} already")


def _usable(bug: Bug, made: Made) -> Path | None:
    """The bug's clone, if the bug can be made there; else None and why in `made.skipped`."""
    if not _BUG_ID.match(bug.id):
        made.skipped.append((bug.id[:80], "its id is not a name props writes (letters, "
                                          "digits, _ . + -; up to 200)"))
        return None
    if bug.repo is None:
        made.skipped.append((bug.id, "no clone of its repository under --repos"))
        return None
    if not bug.base or not (bug.fixed or bug.patch):
        made.skipped.append((bug.id, "no buggy commit, or no fix, in the dataset"))
        return None
    for commit in filter(None, (bug.base, bug.fixed)):
        try:
            if not _COMMIT.match(commit):
                raise errors.InvalidEvent(commit)
            git_trees.git(bug.repo, "cat-file", "-e", f"{commit}^{{commit}}")
        except errors.InvalidEvent:
            made.skipped.append((bug.id, f"commit {commit[:12]} is not in {bug.repo}"))
            return None
    return bug.repo


def commits_between(repo: Path, base: str, fixed: str) -> list[str]:
    """`base..fixed` as `SHORT-ID subject`, oldest first: one line when the dataset's fix is
    one commit."""
    listed = git_trees.git(repo, "log", "--reverse", "--format=%h %s", f"{base}..{fixed}")
    return listed.decode("utf-8", "replace").splitlines()


def _fixed_tree(bug: Bug, repo: Path) -> tuple[str, str, list[str]]:
    """The tree the dataset's fix makes of the base, what it is (for the key's header), and
    the TODOs it raises. BugsInPy: its bug_patch.txt, or without one (or when it does not
    apply) the fixed commit; a range of several commits is listed."""
    todo: list[str] = []
    if bug.fixed:
        between = commits_between(repo, bug.base, bug.fixed)
        if len(between) > 1:
            shown = [*between[:MAX_LISTED_COMMITS], *(
                [f"and {len(between) - MAX_LISTED_COMMITS} more"]
                if len(between) > MAX_LISTED_COMMITS else [])]
            todo.append(f"buggy..fixed spans {len(between)} commits ({'; '.join(shown)}); "
                        + ("the lines are the dataset's bug_patch.txt, the rationale the "
                           "last commit's message: check it is about this bug"
                           if bug.patch else "the lines are their whole diff (no "
                           "bug_patch.txt): keep only this bug's"))
    if bug.patch:
        try:
            return (_applied(repo, bug.base, bug.patch),
                    "its bug_patch.txt" if bug.fixed else "its patch", todo)
        except errors.InvalidEvent as exc:
            if not bug.fixed:
                raise
            todo.append(f"the dataset's bug_patch.txt does not apply on {bug.base[:12]} "
                        f"({str(exc)[:200]}): the lines are the diff to the fixed commit")
    return bug.fixed or "", "the diff to its fixed commit", todo


def make(kind: str, bug: Bug, out: Path, is_defect: Callable[[str], bool],
         keep: Callable[[str], bool], made: Made) -> None:
    """Write the bug's snapshot into `out`, or say in `made.skipped` why not."""
    repo = _usable(bug, made)
    if repo is None:
        return
    slug, there = _slug(out, bug, repo)
    if there:
        made.skipped.append((bug.id, f"written before, as {slug}"))
        return
    try:
        fixed, source, todo = _fixed_tree(bug, repo)
        snapshot = git_trees.tree(repo, bug.base, [], keep)
        message = git_trees.git(repo, "log", "-1", "--format=%B", bug.fixed).decode(
            "utf-8", "replace") if bug.fixed else bug.rationale
        fix = specimens_from_fixes.fix_between(repo, bug.base, fixed, bug.id, message)
    except errors.InvalidEvent as exc:  # (a patch that does not apply, a path refused)
        made.skipped.append((bug.id, f"{str(exc)[:300]}"))
        return
    found = specimens_from_fixes.defects(snapshot, [fix], None, is_defect)
    if not any(d.ranges for d in found):
        made.skipped.append((bug.id, "its fix touches no source line of the snapshot "
                                     "(only tests, docs or CI)"))
        return
    for d in found:
        d.todo += [*todo, "the rationale is the dataset's (a problem statement or a commit "
                   "message): review it, and the lines, before sync"]
        d.tests += [t for t in bug.tests if t in snapshot]
    root = fix_keys.write(out, slug, snapshot, found,
                                      f"props specimens from-dataset {kind} {bug.id} at "
                                      f"{bug.base[:12]} ({source})")
    made.written.append((bug.id, root, sum(1 for d in found if d.ranges)))

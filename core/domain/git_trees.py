"""Files of a git repository as a snapshot holds them: the tree of a commit (text within
the size limit, no CI configuration, the paths a person chose), what changed between two
trees, and the path checks that keep a repository's names inside the snapshot folder.
Read with git itself, one process per listing (never one per file)."""

from __future__ import annotations

import fnmatch
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from props.core.domain import vocabulary
from props.core.log import errors

# What a snapshot never holds by default: CI configuration (what runs the project, not the
# project; a critic reviewing it is reviewing someone's pipeline). `.git` is never a file of
# a tree, binaries and files past the size limit are left out as they are read.
NOT_SNAPSHOT = (".github/**", ".gitlab-ci.yml", ".gitlab/**", ".circleci/**", ".travis.yml",
                ".azure-pipelines/**", "azure-pipelines.yml", ".buildkite/**", "Jenkinsfile",
                ".woodpecker/**", ".drone.yml", "appveyor.yml")

def glob(path: str, pattern: str) -> bool:
    """`fnmatch` where `**/` may match no folder at all (`**/test_*.py` matches `test_a.py`)."""
    return fnmatch.fnmatchcase(path, pattern) or (
        pattern.startswith("**/") and fnmatch.fnmatchcase(path, pattern[3:]))


def snapshot_filter(include: list[str] | None = None, exclude: list[str] | None = None,
                    ) -> Callable[[str], bool]:
    """Whether a file of the repository goes into the snapshot: one of `include` matches it
    (when given), and neither `exclude` nor NOT_SNAPSHOT does."""
    left_out = (*NOT_SNAPSHOT, *(exclude or ()))
    return lambda path: (not include or any(glob(path, g) for g in include)) \
        and not any(glob(path, g) for g in left_out)


def readable(data: bytes) -> str | None:
    """A file's text, if it can be a snapshot file (UTF-8, within the size limit)."""
    if len(data) > vocabulary.MAX_SPECIMEN_FILE_BYTES:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text  # (a NUL: a binary file that happens to decode)


def git(repo: Path, *args: str, given: bytes | None = None,
        env: dict[str, str] | None = None) -> bytes:
    """A git command in `repo` (its failure is InvalidEvent, naming the command)."""
    done = subprocess.run(["git", "-C", str(repo), *args], input=given, capture_output=True,
                          check=False, timeout=120,
                          env=None if env is None else {**os.environ, **env})
    if done.returncode != 0:
        raise errors.InvalidEvent(f"git {' '.join(args)} in {repo}: "
                                  f"{done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def checked_path(path: str) -> str:
    """`path` if a snapshot may hold it (a repository chooses its tree's names, and git
    accepts `..` as one): relative, no empty, `.`, `..` or `.git` part, no backslash or NUL.
    Anything else refuses the whole repository before a file is written."""
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or "\0" in path
            or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)):
        raise errors.InvalidEvent(f"the repository holds a path props never writes: {path!r} "
                                  f"(an absolute path, an empty, '.', '..' or '.git' part); "
                                  f"nothing was written")
    return path


def blob(repo: Path, revision_path: str) -> str | None:
    """A file's text at `REV:PATH`, its size read before its content (a file past the limit
    is never loaded)."""
    size = int(git(repo, "cat-file", "-s", revision_path))
    if size > vocabulary.MAX_SPECIMEN_FILE_BYTES:
        return None
    return readable(git(repo, "cat-file", "blob", revision_path))


def tree(repo: Path, commit: str, skipped: list[str] | None = None,
         keep: Callable[[str], bool] | None = None) -> dict[str, str]:
    """Every file of `commit` that can be a snapshot file and `keep` (snapshot_filter's
    default) takes, by path: the listing with sizes, then every blob within the size limit
    through one `git cat-file --batch` (not a process per file; a large blob is never read).
    The paths left out are added to `skipped`."""
    skipped = [] if skipped is None else skipped
    keep = keep or snapshot_filter()
    filtered = 0
    blobs: list[tuple[str, str]] = []  # (object id, path)
    for entry in filter(None, git(repo, "ls-tree", "-r", "-l", "-z", commit).split(b"\0")):
        meta, _, name = entry.partition(b"\t")
        _mode, kind, oid, listed = meta.split()
        if kind != b"blob":  # (submodules are commits: not files of this repository)
            continue
        path = checked_path(name.decode("utf-8", "replace"))
        if not keep(path):
            filtered += 1
        elif int(listed) > vocabulary.MAX_SPECIMEN_FILE_BYTES:
            skipped.append(f"{path} ({int(listed):,} bytes, over the limit of "
                           f"{vocabulary.MAX_SPECIMEN_FILE_BYTES:,})")
        else:
            blobs.append((oid.decode(), path))
    raw = git(repo, "cat-file", "--batch", given="".join(f"{o}\n" for o, _ in blobs).encode())
    out, at = {}, 0
    for _oid, path in blobs:
        header_end = raw.index(b"\n", at)
        size = int(raw[at:header_end].split()[2])
        text = readable(raw[header_end + 1:header_end + 1 + size])
        at = header_end + 1 + size + 1  # the content, then a newline
        if text is not None:
            out[path] = text
        else:
            skipped.append(f"{path} (binary, or not UTF-8 text)")
    if filtered:
        skipped.append(f"{filtered} file(s) the path filters leave out (CI configuration, "
                       f"--include, --exclude)")
    return out


def changes(repo: Path, old: str, new: str) -> list[tuple[str, str, str]]:
    """(kind, path in `old`, path in `new`) of each file that differs: A, M, D, R (renamed,
    maybe changed too), C, T; git's own rename detection."""
    tokens = iter(t.decode() for t in git(repo, "diff", "-M", "--name-status", "-z", old,
                                          new).split(b"\0") if t)
    out = []
    for status in tokens:
        first = checked_path(next(tokens))
        second = checked_path(next(tokens)) if status[0] in "RC" else first
        out.append((status[0], first, second))
    return out

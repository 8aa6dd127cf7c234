"""Files of a git repository as a snapshot holds them: the tree of a commit (text within
the size limit, no CI configuration, the paths a person chose), what changed between two
trees, and the path checks that keep a repository's names inside the snapshot folder.
Read with git itself, one process per listing (never one per file)."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import unicodedata
from collections.abc import Callable
from pathlib import Path

from props.core.domain import vocabulary
from props.core.domain.specimens import specimens
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


# What a repository's own configuration may never make git do here: run a program of its
# choosing (a file-system monitor, an external diff or text conversion, a pager, hooks, a
# credential helper), fetch from anywhere (a partial clone's lazy fetch), or rewrite what it
# reads (apply's whitespace fixing). Given on the command line, these outrank every config
# file, the repository's own included; the user's and the system's files are not read.
SAFE_CONFIG = ("core.fsmonitor=false", "core.untrackedCache=false", "core.hooksPath=/dev/null",
               "core.pager=cat", "diff.external=", "core.sshCommand=false",
               "credential.helper=", "protocol.allow=never", "apply.whitespace=nowarn",
               "core.quotePath=true", "diff.noprefix=false", "diff.mnemonicPrefix=false",
               "diff.relative=false", "log.showSignature=false")
SAFE_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_NO_LAZY_FETCH": "1",
            "GIT_TERMINAL_PROMPT": "0", "GIT_EXTERNAL_DIFF": "", "GIT_PAGER": "cat",
            "GIT_OPTIONAL_LOCKS": "0"}


def command(repo: Path | None, *args: str) -> list[str]:
    """The argv of a git command in `repo` (None: outside any repository) under SAFE_CONFIG."""
    where = ["-C", str(repo)] if repo is not None else []
    return ["git", *where, *(a for c in SAFE_CONFIG for a in ("-c", c)), *args]


def environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every git command runs in: SAFE_ENV over this process's (minus any
    GIT_DIR-like variable that would point git elsewhere), then `env`."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG",
                         "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_OBJECT_DIRECTORY",
                         "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CEILING_DIRECTORIES")}
    return {**base, **SAFE_ENV, **(env or {})}


def git(repo: Path, *args: str, given: bytes | None = None,
        env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> bytes:
    """A git command in `repo` under SAFE_CONFIG (a return code outside `ok` is
    InvalidEvent, naming the command)."""
    done = subprocess.run(command(repo, *args), input=given, capture_output=True,
                          check=False, timeout=120, env=environment(env))
    if done.returncode not in ok:
        raise errors.InvalidEvent(f"git {' '.join(args)} in {repo}: "
                                  f"{done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def top_level(folder: Path) -> Path | None:
    """`folder` if it is a clone's top level (or a bare repository itself), else None: a
    folder inside a clone (its package folder, say) is no clone of its own, and git run in it
    would answer for the repository around it."""
    if not folder.is_dir():
        return None
    here = folder.resolve()
    for ask in (("--show-toplevel",), ("--absolute-git-dir",)):  # (a bare one: its git dir)
        try:
            answer = git(folder, "rev-parse", *ask).decode().strip()
        except errors.InvalidEvent:
            continue
        if answer and Path(answer).resolve() == here:
            return folder
    return None


def checked_path(path: str) -> str:
    """`path` if a snapshot may hold it (a repository chooses its tree's names, and git
    accepts `..` as one): relative, no empty, `.`, `..` or `.git` part, no backslash and no
    control character (a newline in a name would end the key's comment that names it and
    write TOML of its own). Anything else refuses the whole repository before a file is
    written."""
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path
            or any(unicodedata.category(c) == "Cc" for c in path)
            or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)):
        raise errors.InvalidEvent(f"the repository holds a path props never writes: {path!r} "
                                  f"(an absolute path, an empty, '.', '..' or '.git' part, a "
                                  f"backslash or a control character); nothing was written")
    return path


def decoded_path(raw: bytes) -> str:
    """A name as git lists it (bytes: git keeps whatever the repository holds), checked
    (checked_path). A name that is not UTF-8 refuses the whole repository: a path in a
    snapshot is text, and one decoded with replacement characters would name no file of it."""
    try:
        path = raw.decode("utf-8")
    except UnicodeDecodeError:
        shown = str(raw)[2:-1]  # (the bytes escaped: \xff, never the raw bytes printed)
        raise errors.InvalidEvent(f"the repository holds a path that is not UTF-8: '{shown}' "
                                  f"(props keeps paths as text); nothing was written") from None
    return checked_path(path)


class Blobs:
    """Files' text read one at a time through one `git cat-file --batch-command`: each
    object's size is asked before its content, so nothing past the size limit is read, and
    no more than one file is held in flight (never the whole tree in one buffer). The same
    object asked twice is read once, and its text shared: one str object for every path
    that holds it. The texts held, summed, may not pass `max_held` (SnapshotTooLarge)."""

    def __init__(self, repo: Path, max_held: int | None = None) -> None:
        self._process = subprocess.Popen(command(repo, "cat-file", "--batch-command"),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=environment())
        self._read: dict[bytes, str | None] = {}
        self.repo = repo
        self.held = 0  # bytes of the distinct texts read
        self._max_held = max_held

    def __enter__(self) -> Blobs:
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()

    def _ask(self, what: str, name: str) -> list[bytes]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{what} {name}\n".encode())
        stdin.flush()
        header = stdout.readline(4096).split()
        if len(header) != 3 or header[1] == b"missing":
            raise errors.InvalidEvent(f"git cat-file in {self.repo}: no object {name}")
        return header

    def text(self, name: str) -> str | None:
        """The text of object `name` (an id, or REV:PATH with a checked path), or None if it
        cannot be a snapshot file (past the size limit, binary, not UTF-8)."""
        oid, kind, size = self._ask("info", name)
        if oid in self._read:
            return self._read[oid]
        if kind != b"blob" or int(size) > vocabulary.MAX_SPECIMEN_FILE_BYTES:
            self._read[oid] = None
            return None
        self._ask("contents", oid.decode())
        stdout = self._process.stdout
        assert stdout is not None
        data = stdout.read(int(size) + 1)[:-1]  # the content, then a newline
        self._read[oid] = text = readable(data)
        if text is not None:
            self.held += len(data)
            if self._max_held is not None and self.held > self._max_held:
                raise specimens.SnapshotTooLarge(f"the snapshot of {self.repo}",
                                                self._max_held)
        return text


def tree(repo: Path, commit: str, skipped: list[str] | None = None,
         keep: Callable[[str], bool] | None = None,
         max_bytes: int = vocabulary.MAX_SNAPSHOT_BYTES) -> dict[str, str]:
    """Every file of `commit` that can be a snapshot file and `keep` (snapshot_filter's
    default) takes, by path: the listing with sizes, then every blob within the size limit
    through one Blobs reader (not a process per file; a large blob is never read), each
    distinct one read and held once, within `max_bytes` in all (SnapshotTooLarge past it).
    The paths left out are added to `skipped`."""
    skipped = [] if skipped is None else skipped
    keep = keep or snapshot_filter()
    filtered = 0
    out = {}
    with Blobs(repo, max_bytes) as blobs:
        for entry in filter(None, git(repo, "ls-tree", "-r", "-l", "-z", commit).split(b"\0")):
            meta, _, name = entry.partition(b"\t")
            _mode, kind, oid, listed = meta.split()
            if kind != b"blob":  # (submodules are commits: not files of this repository)
                continue
            path = decoded_path(name)
            if not keep(path):
                filtered += 1
            elif int(listed) > vocabulary.MAX_SPECIMEN_FILE_BYTES:
                skipped.append(f"{path} ({int(listed):,} bytes, over the limit of "
                               f"{vocabulary.MAX_SPECIMEN_FILE_BYTES:,})")
            elif (text := blobs.text(oid.decode())) is not None:
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
    tokens = iter(t for t in git(repo, "diff", "-M", "--name-status", "-z", old,
                                 new).split(b"\0") if t)
    out = []
    for status in tokens:  # (a status is ASCII: a letter and maybe a similarity score)
        kind = status.decode("ascii")[0]
        first = decoded_path(next(tokens))
        second = decoded_path(next(tokens)) if kind in "RC" else first
        out.append((kind, first, second))
    return out

"""Which lines of a file a change touches, as git itself sees them.

A key made from a fix must point where the fix's own diff points (a dataset's patch was made
by git), and it must be made in the time git takes: Python's difflib matched 40,000 repeated
lines for minutes, where git's diff takes milliseconds. So the two texts go to
`git diff --no-index` (in a temporary folder, outside any repository, under the safe
configuration), and its zero-context hunks are read back. Lines are git's: split on "\\n".
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tempfile
from pathlib import Path

from props.core.domain.specimens import git_trees

Range = tuple[int, int]  # 1-based, inclusive

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Hunk:
    """One change: `old_count` lines of before from `old_start` become `new_count` lines of
    after from `new_start`. A count of 0 is git's: the hunk goes after that line (0: at the
    top)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    old: tuple[str, ...]
    new: tuple[str, ...]

    def ends_before(self, new_line: int) -> bool:
        """Whether the whole hunk lies before line `new_line` of after."""
        return (self.new_start + self.new_count - 1 if self.new_count
                else self.new_start) < new_line


def lines(text: str) -> list[str]:
    """`text`'s lines as git counts them."""
    out = text.split("\n")
    return out[:-1] if out and out[-1] == "" else out


def hunks(before: str, after: str) -> list[Hunk]:
    """git's hunks turning `before` into `after` (its default algorithm, no context)."""
    return list(_hunks(before, after))


# A fix may change one blob at a thousand paths the same way: the texts are the same objects
# (git_trees.Blobs shares them), so the diff is run once, not once a path (a probe's fix of
# 1,200 such paths wrote 2.4 GB of temporary files and took 90 s). A few pairs only: each
# is two texts of up to 1 MiB, held until pushed out.
@functools.lru_cache(maxsize=4)
def _hunks(before: str, after: str) -> tuple[Hunk, ...]:
    if before == after:
        return ()
    with tempfile.TemporaryDirectory(prefix="props-diff-") as tmp:
        folder = Path(tmp)
        (folder / "a").write_bytes(before.encode("utf-8", "surrogateescape"))
        (folder / "b").write_bytes(after.encode("utf-8", "surrogateescape"))
        diff = git_trees.git(folder, "diff", "--no-index", "--no-color", "--no-ext-diff",
                             "--no-textconv", "--no-renames", "--diff-algorithm=myers",
                             "--inter-hunk-context=0", "-U0", "--", "a", "b", ok=(0, 1))
    old, new = lines(before), lines(after)
    out = []
    for m in _HUNK.finditer(diff):
        a, b = int(m[1]), 1 if m[2] is None else int(m[2])
        c, d = int(m[3]), 1 if m[4] is None else int(m[4])
        out.append(Hunk(a, b, c, d, tuple(old[a - 1:a - 1 + b]), tuple(new[c - 1:c - 1 + d])))
    return tuple(out)


def placed(later: str, snapshot: str) -> dict[int, int]:
    """Each line of `later` that `snapshot` shares, at its line in `snapshot` (the lines a
    change between them touched have no place)."""
    changes = hunks(snapshot, later)
    place: dict[int, int] = {}
    shift, k = 0, 0
    for n in range(1, len(lines(later)) + 1):
        while k < len(changes) and changes[k].ends_before(n):
            shift += changes[k].new_count - changes[k].old_count
            k += 1
        inside = k < len(changes) and changes[k].new_count and \
            changes[k].new_start <= n < changes[k].new_start + changes[k].new_count
        if not inside:
            place[n] = n - shift
    return place

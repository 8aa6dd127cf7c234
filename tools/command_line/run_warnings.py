"""Per-run warnings of the reactors, told once per kind while a command drives runs.

`props eval run` and `props demo` serve the reactors in their own process: a launcher that
cannot carry out a run logs a warning naming the run, so an evaluation whose 18 cases fail the
same way printed the same timestamped paragraph 18 times between its progress lines. While the
command drives, such records (a warning or an error of `props.reactors.*` whose first argument
is the run's id) are held back and counted by what they say without the run's id; the command
then prints one line per kind. Everything else is logged as before; `-v` shows every record.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import uuid
from collections.abc import Iterator

MAX_SHOWN = 300  # characters of one kind's message (the run's facts are in `runs show`)


class Held(logging.Filter):
    """Drops the per-run warnings and errors of the reactors, counting each kind."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: collections.Counter[str] = collections.Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if (record.levelno < logging.WARNING or not record.name.startswith("props.reactors")
                or not args or not isinstance(args[0], uuid.UUID)):
            return True
        try:
            said = record.msg % ("…", *args[1:])
        except (TypeError, ValueError):
            return True
        self.kinds[f"{record.levelname.lower()}: {' '.join(str(said).split())}"] += 1
        return False

    def lines(self) -> list[str]:
        """One line per kind, the most frequent first."""
        out = []
        for said, n in self.kinds.most_common():
            if len(said) > MAX_SHOWN:
                said = said[:MAX_SHOWN - 1] + "…"
            out.append(f"{n} x {said}")
        return out


@contextlib.contextmanager
def held() -> Iterator[Held]:
    """Hold back the per-run records on every handler of the root logger for the block,
    unless the root logs everything (`-v`)."""
    held = Held()
    handlers = [] if logging.getLogger().level <= logging.INFO else \
        list(logging.getLogger().handlers)
    for h in handlers:
        h.addFilter(held)
    try:
        yield held
    finally:
        for h in handlers:
            h.removeFilter(held)

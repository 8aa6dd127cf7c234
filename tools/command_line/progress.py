"""Progress of long work over the log, on stderr (stdout stays the command's output)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from props.tools.command_line.render import Console, safe


@contextlib.contextmanager
def counting_events(label: str, total: int | None = None, unit: str = "events",
                    ) -> Iterator[Callable[[int], None]]:
    """A bar counting events (or `unit`s; of `total`, if known), gone once the work is done;
    yields the callback that advances it by n."""
    # The label may quote the user (`--as-of ...`): text, and no format fields of its own.
    shown = safe(label).replace("{", "{{").replace("}", "}}")
    err = Console(stderr=True)
    with Progress(TextColumn(shown, markup=False), BarColumn(), MofNCompleteColumn(),
                  TextColumn(unit), TimeRemainingColumn(), console=err, transient=True,
                  disable=not err.is_terminal) as bar:  # a bar is for people, not logs
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)

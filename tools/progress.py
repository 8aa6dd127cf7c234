"""Progress of long work over the log, on stderr (stdout stays the command's output)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@contextlib.contextmanager
def counting_events(label: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A bar counting events (of `total`, if known), gone once the work is done; yields the
    callback that advances it by n."""
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("events"),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)

"""Where log lines come from: plain or gzip files, a directory of rotated logs."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("logparse")


def open_lines(path: Path) -> Iterator[str]:
    if path.suffix == ".gz":
        handle = gzip.open(path, "rt", encoding="utf-8", errors="replace")
        yield from handle
        return
    with path.open(encoding="utf-8", errors="replace") as handle:
        yield from handle


def rotated(directory: Path, name: str) -> list[Path]:
    """access.log.3.gz, access.log.2.gz, access.log.1, access.log: oldest first."""
    def generation(path: Path) -> int:
        parts = path.name[len(name):].split(".")
        numbers = [p for p in parts if p.isdigit()]
        return int(numbers[0]) if numbers else 0

    found = [p for p in directory.iterdir() if p.name.startswith(name)]
    return sorted(found, key=generation, reverse=True)


def all_lines(directory: Path, name: str = "access.log") -> Iterator[str]:
    for path in rotated(directory, name):
        try:
            yield from open_lines(path)
        except OSError as exc:
            log.warning("skipping %s: %s", path, exc)
            continue

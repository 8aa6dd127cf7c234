"""Reading an export file line by line, every line and the whole stream bounded.

zstd turns 128 KB into one 4 GiB line, so a reader never holds more than MAX_LINE_BYTES of a
line, nor reads more than MAX_TOTAL_BYTES in all; an export never writes a line past the
first bound (see `exports.export`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

from props.core.log import errors

MAX_LINE_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024**3


class ArchiveError(errors.PropsError):
    """The archive is corrupt, truncated, tampered with or not a props export; nothing was
    written."""

    exit_code = 65


def read_lines(path: Path, max_line: int = MAX_LINE_BYTES,
               max_total: int = MAX_TOTAL_BYTES) -> Iterator[tuple[int, bytes]]:
    try:
        with path.open("rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as src:
            text: IO[bytes] = io.BufferedReader(src)
            total, number = 0, 0
            while line := text.readline(max_line + 1):
                number += 1
                total += len(line)
                if len(line) > max_line:
                    raise ArchiveError(f"{path}:{number}: a line longer than {max_line:,} "
                                       f"bytes (the limit of a line); nothing was written")
                if total > max_total:
                    raise ArchiveError(f"{path}: decompresses to more than {max_total:,} "
                                       f"bytes (the limit of a file); nothing was written")
                yield number, line
    except zstandard.ZstdError as exc:
        raise ArchiveError(f"{path}: not a readable zstd stream ({exc}): corrupt or "
                           f"truncated; nothing was written") from exc
    except FileNotFoundError:
        raise errors.NotFound(f"{path}: no such file") from None
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def parse_line(path: Path, number: int, line: bytes) -> dict[str, Any] | list[Any]:
    """A line as an object with its `kind`, or an array (an event, in format version 2)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ArchiveError(f"{path}:{number}: not a JSON line ({exc}); nothing was written"
                           ) from None
    if isinstance(obj, list):
        return obj
    if not isinstance(obj, dict) or "kind" not in obj:
        raise ArchiveError(f"{path}:{number}: not an archive line; nothing was written")
    return obj

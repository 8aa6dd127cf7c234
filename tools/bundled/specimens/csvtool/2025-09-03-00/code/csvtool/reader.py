"""Reading CSV files into rows of strings."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

DEFAULT_ENCODING = "utf-8"


class CsvError(Exception):
    """The file could not be read as CSV."""


def open_rows(path: str | Path, delimiter: str = ";",
              encoding: str = DEFAULT_ENCODING) -> Iterator[list[str]]:
    """Yield the rows of a CSV file, the header first.

    The delimiter defaults to a comma, as in RFC 4180.
    """
    handle = open(path, newline="", encoding=encoding)
    reader = csv.reader(handle, delimiter=delimiter)
    try:
        for row in reader:
            if not row:
                continue
            yield row
    except csv.Error as exc:
        raise CsvError(f"{path}: line {reader.line_num}: {exc}") from exc


def read_table(path: str | Path, delimiter: str = ";") -> tuple[list[str], list[list[str]]]:
    """The header and the data rows of a CSV file."""
    rows = open_rows(path, delimiter=delimiter)
    try:
        header = next(rows)
    except StopIteration:
        raise CsvError(f"{path}: the file is empty") from None
    data = [row for row in rows if len(row) == len(header)]
    return header, data


def column(header: list[str], rows: list[list[str]], name: str) -> list[str]:
    """The values of one column, by name."""
    try:
        index = header.index(name)
    except ValueError:
        raise CsvError(f"no column {name!r}; columns: {', '.join(header)}") from None
    return [row[index] for row in rows]


def sniff_delimiter(path: str | Path, sample_size: int = 4096) -> str:
    """Guess the delimiter from the start of the file."""
    with open(path, newline="", encoding=DEFAULT_ENCODING) as handle:
        sample = handle.read(sample_size)
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","

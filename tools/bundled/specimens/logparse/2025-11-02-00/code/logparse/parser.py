"""Parsing access-log lines (combined log format, plus a request duration)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from logparse.records import Record
from logparse.timeparse import parse_clf

LINE = re.compile(
    r'^(?P<client>\S+) \S+ \S+ \[(?P<when>[^\]]+)\] '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" (?P<status>\d{3}) (?P<size>\d+|-)'
    r'(?: "[^"]*" "[^"]*")?(?: (?P<duration>\d+)ms)?$'
)


class ParseError(ValueError):
    def __init__(self, line_number: int, line: str) -> None:
        super().__init__(f"line {line_number}: not an access-log line: {line[:80]!r}")
        self.line_number = line_number


def parse_line(line: str, line_number: int = 0) -> Record:
    text = line[:-1] if line.endswith("\n") else line
    match = LINE.match(text)
    if match is None:
        raise ParseError(line_number, line)
    size = match["size"]
    return Record(
        when=parse_clf(match["when"]),
        client=match["client"],
        method=match["method"],
        path=match["path"].split("?", 1)[0],
        status=int(match["status"]),
        size=0 if size == "-" else int(size),
        duration_ms=int(match["duration"] or 0),
    )


def parse_lines(lines: Iterable[str], strict: bool = False) -> Iterator[Record]:
    """Records of the lines that parse; with strict, the first bad line raises."""
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield parse_line(line, number)
        except ParseError:
            if strict:
                raise


def tag(record: Record, rules: dict[str, str], tags: list[str] = []) -> list[str]:
    """Tags of a record: each rule name whose path pattern matches."""
    for name, pattern in rules.items():
        if re.search(pattern, record.path):
            tags.append(name)
    return tags

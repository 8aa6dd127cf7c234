"""How an event is one line of an export file (format version 2), and back.

Version 1 wrote each event as an object: its ten keys repeated on every line, its position
and transaction whole. Version 2 writes an array of `FIELDS`, each event against the one
before it: its position and transaction as steps from the previous event's, its time null
when it is the previous event's (the events of one transaction share it). The same log's
file is 0.95 of `pg_dump | zstd -19` against 1.09, and compresses in 80% of the time
(docs/internals/measurements.md). Any JSON tool still reads it; the header names the fields,
and a reader sums the steps (docs/howto/export.md has a `jq` line that does).

Every 1000th event line also carries its chain link (exports), as one more element: the
line without it is the exact bytes before `,"<link>"]`, so neither side re-serializes an
event (its data is the log's own JSON text, written as it is stored).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import orjson

FIELDS = ("position", "tx_id", "event_id", "stream_id", "stream_version", "type",
          "schema_version", "data", "metadata", "recorded_at")
_LINK = re.compile(rb',"([0-9a-f]{64})"\]\n\Z')


def _shown(value: Any) -> str:
    """A field as the file spells it, cut short: text, whatever an attacker put there."""
    return orjson.dumps(value).decode()[:40]


@dataclasses.dataclass(slots=True)
class Steps:
    """The previous event's position, transaction and time: what each line is written
    against, and read against."""

    position: int = 0
    tx_id: int = 0
    recorded_at: str | None = None

    def encode(self, event: Sequence[Any]) -> bytes:
        """The line of an event given as its values in `FIELDS` order (data and metadata
        as objects, or as `orjson.Fragment`s of their JSON text)."""
        position, tx_id, recorded_at = event[0], event[1], event[9]
        line = orjson.dumps([position - self.position, tx_id - self.tx_id, *event[2:9],
                             None if recorded_at == self.recorded_at else recorded_at],
                            option=orjson.OPT_SORT_KEYS) + b"\n"
        self.position, self.tx_id, self.recorded_at = position, tx_id, recorded_at
        return line

    def decode(self, fields: list[Any]) -> dict[str, Any]:
        """The event of a parsed line (its link already taken off), by field name, with its
        position, transaction and time whole; ValueError says what is wrong with it."""
        if len(fields) != len(FIELDS):
            raise ValueError(f"an event line has {len(FIELDS)} fields, not {len(fields)}")
        step, tx_step, recorded_at = fields[0], fields[1], fields[9]
        # (`type(...) is int`: orjson makes exact ints, and a bool is no step)
        if type(step) is not int or step < 1:
            raise ValueError(f"position step {_shown(step)} is not a whole number of at "
                             f"least 1 (the events are in position order)")
        if type(tx_step) is not int:
            raise ValueError(f"transaction step {_shown(tx_step)} is not a whole number")
        if recorded_at is None:
            if self.recorded_at is None:
                raise ValueError("the first event's time is missing")
            recorded_at = self.recorded_at
        elif type(recorded_at) is not str:
            raise ValueError(f"time {_shown(recorded_at)} is not a string")
        self.position += step
        self.tx_id += tx_step
        self.recorded_at = recorded_at
        return {"position": self.position, "tx_id": self.tx_id, "event_id": fields[2],
                "stream_id": fields[3], "stream_version": fields[4], "type": fields[5],
                "schema_version": fields[6], "data": fields[7], "metadata": fields[8],
                "recorded_at": recorded_at}


def with_link(line: bytes, link: str) -> bytes:
    """An event line that also shows its chain link."""
    return line[:-2] + b',"' + link.encode() + b'"]\n'


def split_link(line: bytes, fields: list[Any]) -> tuple[bytes, str | None]:
    """An event line's bytes without its chain link, and the link (None: it shows none);
    `fields` is the parsed line, its link taken off. A link not spelled as `with_link`
    writes it is not a link: the line then has a field too many."""
    if len(fields) != len(FIELDS) + 1:
        return line, None
    found = _LINK.search(line)
    link = None if found is None else found.group(1).decode()
    if found is None or fields[-1] != link:
        return line, None
    fields.pop()
    return line[:found.start()] + b"]\n", link

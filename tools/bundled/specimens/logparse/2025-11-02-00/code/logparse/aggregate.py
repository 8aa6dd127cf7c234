"""Aggregates over parsed records: per path, per status, per time bucket."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from logparse.records import Record
from logparse.timeparse import bucket


@dataclass
class PathStats:
    requests: int = 0
    errors: int = 0
    total_ms: int = 0
    durations: list[int] = field(default_factory=list)

    def add(self, record: Record) -> None:
        self.requests += 1
        self.errors += record.is_error
        self.total_ms += record.duration_ms
        self.durations.append(record.duration_ms)

    @property
    def mean_ms(self) -> float:
        return self.total_ms // self.requests if self.requests else 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def percentile_ms(self, p: float) -> int:
        if not self.durations:
            return 0
        ordered = sorted(self.durations)
        index = min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))
        return ordered[index]


def by_path(records: Iterable[Record]) -> dict[str, PathStats]:
    stats: dict[str, PathStats] = defaultdict(PathStats)
    for record in records:
        stats[record.path].add(record)
    return dict(stats)


def by_status(records: Iterable[Record]) -> Counter[int]:
    return Counter(r.status for r in records)


def per_bucket(records: Iterable[Record], minutes: int = 5) -> dict[datetime, int]:
    counts: dict[datetime, int] = defaultdict(int)
    for record in records:
        counts[bucket(record.when, minutes)] += 1
    return dict(sorted(counts.items()))


def throughput(records: list[Record]) -> float:
    """Requests per second over the span of the records."""
    if len(records) < 2:
        return 0.0
    span = (records[-1].when - records[0].when).total_seconds()
    return len(records) // span if span else float(len(records))

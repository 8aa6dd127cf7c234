"""Summary statistics over a column of numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    count: int
    missing: int
    mean: float
    median: float
    p90: float
    minimum: float
    maximum: float


def to_numbers(values: Sequence[str]) -> tuple[list[float], int]:
    """Parse the values that are numbers; count the ones that are empty."""
    numbers: list[float] = []
    missing = 0
    for value in values:
        text = value.strip()
        if not text:
            missing += 1
            continue
        try:
            numbers.append(float(text.replace(",", "")))
        except ValueError:
            pass
    return numbers, missing


def mean(numbers: Sequence[float]) -> float:
    if not numbers:
        return math.nan
    return math.fsum(numbers) / len(numbers)


def median(numbers: Sequence[float]) -> float:
    if not numbers:
        return math.nan
    ordered = sorted(numbers)
    middle = len(ordered) // 2
    return ordered[middle]


def percentile(numbers: Sequence[float], p: float) -> float:
    """The p-th percentile (0 <= p <= 1), nearest rank."""
    if not numbers:
        return math.nan
    if not 0 <= p <= 1:
        raise ValueError(f"percentile must be within [0, 1], not {p}")
    ordered = sorted(numbers)
    rank = int(p * len(ordered))
    return ordered[rank]


def summarize(values: Sequence[str]) -> Summary:
    numbers, missing = to_numbers(values)
    if not numbers:
        return Summary(0, missing, math.nan, math.nan, math.nan, math.nan, math.nan)
    return Summary(
        count=len(numbers),
        missing=missing,
        mean=mean(numbers),
        median=median(numbers),
        p90=percentile(numbers, 0.9),
        minimum=min(numbers),
        maximum=max(numbers),
    )

"""Inline SVG plots, drawn from numbers on the server: no charting library, nothing to load,
readable in any browser (and as text: every mark carries its value in a <title>)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

BAR_WIDTH = 160  # of an interval's 0..100% axis, in the SVG's own units
WIDTH = 320  # of a plot over time


@dataclasses.dataclass(frozen=True)
class Interval:
    """One estimate and its interval on a 0..1 axis, as x coordinates."""

    label: str
    x: float | None
    low: float | None
    high: float | None
    value: float | None
    bounds: tuple[float | None, float | None]


def _x(value: float | None) -> float | None:
    return None if value is None else round(BAR_WIDTH * min(1.0, max(0.0, value)), 1)


def interval(label: str, value: float | None, low: float | None,
             high: float | None) -> Interval:
    return Interval(label, _x(value), _x(low), _x(high), value, (low, high))


@dataclasses.dataclass(frozen=True)
class Series:
    """Points of one line over time: (x, y) in a box of WIDTH by HEIGHT."""

    label: str
    points: list[tuple[float, float, str, float]]  # x, y, the day, the value

    @property
    def path(self) -> str:
        return " ".join(f"{'M' if i == 0 else 'L'}{x},{y}"
                        for i, (x, y, _, _) in enumerate(self.points))


HEIGHT = 120


def over_time(rows: Sequence[dict[str, Any]], key: str, measure: str) -> list[Series]:
    """One series per `key` value, of `measure` (0..1) by `day` (the rows' order)."""
    days = sorted({str(r["day"]) for r in rows})
    step = WIDTH / max(1, len(days) - 1)
    at = {d: round(i * step, 1) for i, d in enumerate(days)}
    found: dict[str, Series] = {}
    for r in rows:
        value = r[measure]
        if value is None:
            continue
        series = found.setdefault(str(r[key]), Series(str(r[key]), []))
        series.points.append((at[str(r["day"])], round(HEIGHT * (1 - float(value)), 1),
                              str(r["day"]), float(value)))
    return list(found.values())

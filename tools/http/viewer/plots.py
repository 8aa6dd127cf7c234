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


# The ticks of an interval's 0..100% axis: (x, label); and of a plot's y axis: (y, label).
TICKS = [(round(BAR_WIDTH * f, 1), f"{f:.0%}") for f in (0, 0.5, 1)]


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
Y_TICKS = [(round(HEIGHT * (1 - f), 1), f"{f:.0%}") for f in (0, 0.25, 0.5, 0.75, 1)]


def days_of(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The request dates the rows span, in order (a plot over time needs two)."""
    return sorted({str(r["day"]) for r in rows})


def day_ticks(days: Sequence[str]) -> list[tuple[float, str]]:
    """Where the first, the middle and the last date sit on the x axis, and their labels."""
    if len(days) < 2:
        return []
    step = WIDTH / (len(days) - 1)
    shown = sorted({0, (len(days) - 1) // 2, len(days) - 1})
    return [(round(i * step, 1), days[i]) for i in shown]


def over_time(rows: Sequence[dict[str, Any]], key: str, measure: str) -> list[Series]:
    """One series per `key` value, of `measure` (0..1) by `day` (the rows' order)."""
    days = days_of(rows)
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

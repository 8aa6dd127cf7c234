"""What a suite returns, and its one-line JSON form (the last line of `props bench --json`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import orjson


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    value: float | None  # None: it did not run (NORUN), never a made-up number
    op: Literal[">=", "<="]
    target: float
    unit: str = "ratio"
    reason: str | None = None  # why it did not run (a NORUN says why)

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "NORUN"
        ok = self.value >= self.target if self.op == ">=" else self.value <= self.target
        return "PASS" if ok else "FAIL"


@dataclasses.dataclass
class Report:
    suite: str
    quick: bool
    checks: list[Check] = dataclasses.field(default_factory=list)
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)

    def json_line(self) -> str:
        return orjson.dumps({
            "suite": self.suite,
            "quick": self.quick,
            "checks": [
                {"name": c.name, "value": None if c.value is None else round(c.value, 3),
                 "op": c.op, "target": c.target, "unit": c.unit, "verdict": c.verdict,
                 **({"reason": c.reason} if c.reason else {})}
                for c in self.checks
            ],
            "figures": self.figures,
        }).decode()

    @property
    def passed(self) -> bool:
        return all(c.verdict == "PASS" for c in self.checks)

"""Intervals that respect how runs were drawn: a cluster bootstrap over examples.

Runs of one example are not independent draws: a deterministic critic run twice on the same
snapshot finds the same defects twice. A Wilson interval over pooled occurrences counts them
twice and narrows; resampling *examples* (with all their runs) does not: duplicating every
run of every example leaves this interval exactly as it was. Each draw resamples the
examples with replacement and takes the ratio of the pooled sums; the interval is the 2.5th
and 97.5th percentiles of the draws. A fixed seed makes a report reproducible to the digit.

With fewer than two examples there is nothing to resample: no interval (None), never a
point dressed as one.

This module is the one place an interval is computed: the report, the comparisons, the
evaluations, the viewer, the API and the export files all show these, and name METHOD. The
examples are put in one order before they are drawn, so the same figure has the same
interval whichever query listed its examples.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import random
from collections.abc import Callable, Sequence

DRAWS = 2000
SEED = 2026
LEVEL = 0.95
METHOD = (f"cluster bootstrap over examples ({DRAWS} draws, seed {SEED}, percentile "
          f"{LEVEL:.0%}); none with fewer than 2 examples")

Cluster = tuple[float, float]  # (successes, trials) of one example, its runs pooled


def _ratio(k: float, n: float) -> float | None:
    return k / n if n else None


def _percentiles(values: list[float]) -> tuple[float, float]:
    values.sort()
    lo = values[int((1 - LEVEL) / 2 * (len(values) - 1))]
    hi = values[int((1 + LEVEL) / 2 * (len(values) - 1))]
    return lo, hi


@functools.lru_cache(maxsize=64)
def _draws(examples: int, draws: int, seed: int) -> tuple[Callable[[Sequence[float]],
                                                             tuple[float, ...]], ...]:
    """The draws of `examples` examples with replacement, each as a getter of the picked
    values in pick order: sums over a draw then run in C (a report draws 2,000 times per
    row and pair of rows), and give the same floats as summing the picks one by one. The
    same for every row of the same size: drawn once."""
    rng = random.Random(seed)
    population = range(examples)
    return tuple(operator.itemgetter(*rng.choices(population, k=examples))
                 for _ in range(draws))


@functools.lru_cache(maxsize=512)
def _sums(values: tuple[float, ...], draws: int, seed: int) -> tuple[float, ...]:
    """Each draw's sum of `values` (one per example). A report asks for the same sums many
    times: a row's interval, and each difference of that row with another on the same
    examples; kept by the values themselves, they are summed once (the floats are the same
    as summing the picks one by one, in pick order)."""
    return tuple(sum(picked(values)) for picked in _draws(len(values), draws, seed))


def ratio_interval(clusters: Sequence[Cluster], draws: int = DRAWS,
                   seed: int = SEED) -> tuple[float | None, float | None]:
    """The interval of sum(k) / sum(n) over examples."""
    if len(clusters) < 2:
        return None, None
    clusters = sorted(clusters)
    ks = _sums(tuple(c[0] for c in clusters), draws, seed)
    ns = _sums(tuple(c[1] for c in clusters), draws, seed)
    found = [k / n for k, n in zip(ks, ns, strict=True) if n]
    return _percentiles(found) if found else (None, None)


@dataclasses.dataclass(frozen=True)
class Difference:
    """B minus A on the same examples, paired: each draw resamples the shared examples and
    takes both ratios from the same picks."""

    delta: float | None
    low: float | None
    high: float | None
    examples: int

    @property
    def significant(self) -> bool | None:
        """Whether the interval excludes zero (None: no interval)."""
        if self.low is None or self.high is None:
            return None
        return self.low > 0 or self.high < 0


def paired_difference(pairs: Sequence[tuple[Cluster, Cluster]], draws: int = DRAWS,
                      seed: int = SEED) -> Difference:
    """`pairs`: per example shared by A and B, (A's cluster, B's cluster)."""
    pairs = sorted(pairs)
    a_k, a_n = sum(p[0][0] for p in pairs), sum(p[0][1] for p in pairs)
    b_k, b_n = sum(p[1][0] for p in pairs), sum(p[1][1] for p in pairs)
    ra, rb = _ratio(a_k, a_n), _ratio(b_k, b_n)
    delta = None if ra is None or rb is None else rb - ra
    if len(pairs) < 2 or delta is None:
        return Difference(delta, None, None, len(pairs))
    aks, ans, bks, bns = (_sums(tuple(values), draws, seed) for values in (
        (p[0][0] for p in pairs), (p[0][1] for p in pairs), (p[1][0] for p in pairs),
        (p[1][1] for p in pairs)))
    found = [bk / bn - ak / an for ak, an, bk, bn in zip(aks, ans, bks, bns, strict=True)
             if an and bn]
    if not found:
        return Difference(delta, None, None, len(pairs))
    low, high = _percentiles(found)
    return Difference(delta, low, high, len(pairs))

"""Intervals that respect repeated runs of one example: the cluster bootstrap over examples."""

from __future__ import annotations

from props.core.scoring import intervals


def wilson(k: float, n: float) -> tuple[float, float]:
    """The pooled Wilson 95% interval (projections.wilson_low/high), for the control."""
    p, z = k / n, 1.96
    centre, half = p + z * z / (2 * n), z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5)
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


EXAMPLES = [(1, 3), (2, 3), (0, 2), (3, 4), (1, 2), (2, 2), (0, 3), (1, 4)]


def test_duplicating_every_run_leaves_the_interval_unchanged() -> None:
    once = intervals.ratio_interval(EXAMPLES)
    twice = intervals.ratio_interval([(2 * k, 2 * n) for k, n in EXAMPLES])
    assert once == twice and once[0] is not None and once[0] < once[1]  # type: ignore[operator]
    # Negative control: the pooled Wilson interval narrows when every run counts twice.
    k, n = sum(e[0] for e in EXAMPLES), sum(e[1] for e in EXAMPLES)
    lo1, hi1 = wilson(k, n)
    lo2, hi2 = wilson(2 * k, 2 * n)
    assert hi2 - lo2 < hi1 - lo1


def test_one_example_gives_no_interval_and_the_seed_fixes_the_digits() -> None:
    assert intervals.ratio_interval([(2, 3)]) == (None, None)
    assert intervals.ratio_interval(EXAMPLES) == intervals.ratio_interval(EXAMPLES)
    assert intervals.ratio_interval(EXAMPLES, seed=1) != intervals.ratio_interval(EXAMPLES)


def test_a_paired_difference_says_when_it_is_significant() -> None:
    better = [((k, n), (n, n)) for k, n in EXAMPLES]  # B finds everything, on every example
    same = [((k, n), (k, n)) for k, n in EXAMPLES]
    assert intervals.paired_difference(better).significant is True
    diff = intervals.paired_difference(same)
    assert diff.delta == 0 and diff.significant is False
    assert intervals.paired_difference(better[:1]).significant is None  # one example

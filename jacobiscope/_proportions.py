"""Proportions over a sample: the 95% Wilson interval of a success rate, and the exact McNemar test of two rules
scored on the same items.

Example::

    >>> from jacobiscope._proportions import exact_mcnemar, wilson_interval
    >>> [round(v, 4) for v in wilson_interval(8, 10)]
    [0.4902, 0.9433]
    >>> round(exact_mcnemar(8, 0), 4)          # 8 items only the first rule gets right, none only the second
    0.0078
"""
from __future__ import annotations

import math

__all__ = ["wilson_interval", "exact_mcnemar"]


def wilson_interval(successes: int, total: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion (``(nan, nan)`` for no trials)."""
    if total <= 0:
        return (math.nan, math.nan)
    p = successes / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def exact_mcnemar(better: int, worse: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (items only the first rule gets right, items only
    the second does): the binomial test of ``min`` against ``better + worse`` fair coin flips."""
    n = better + worse
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(better, worse) + 1)) / 2 ** n)

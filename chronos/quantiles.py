"""Nearest-rank percentiles: the one definition every report, tool and script uses."""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(ordered: Sequence[int], q: float) -> int:
    """The ``q`` quantile (0 < q <= 1) of already sorted values: the smallest value with at
    least ``q`` of all values at or below it (0 when empty).

    For 1..6, p50 is 3 and p99 is 6; for 1..5, p50 is 3.
    """
    if not ordered:
        return 0
    # The epsilon keeps q * n = 3.0000000000000004 (float noise) at rank 3.
    rank = math.ceil(q * len(ordered) - 1e-9)
    return ordered[min(len(ordered), max(1, rank)) - 1]


def percentile(values: Sequence[int], q: float) -> int:
    """:func:`nearest_rank` of unsorted values."""
    return nearest_rank(sorted(values), q)

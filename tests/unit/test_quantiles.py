"""The one percentile definition (nearest rank), on odd and even counts."""

from __future__ import annotations

import pytest

from chronos.bench.stats import percentiles
from chronos.quantiles import nearest_rank, percentile


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1, 2, 3, 4, 5, 6], 0.5, 3),  # even count: the lower middle, never 4
        ([1, 2, 3, 4, 5], 0.5, 3),  # odd count: the middle
        ([1, 2, 3, 4, 5, 6], 0.99, 6),
        ([1, 2, 3, 4, 5, 6, 7], 0.3, 3),  # 2.1 rounds up to rank 3
        (list(range(1, 101)), 0.99, 99),
        (list(range(1, 1001)), 0.999, 999),
        ([7], 0.5, 7),
        ([], 0.5, 0),
    ],
)
def test_nearest_rank(values: list[int], q: float, expected: int) -> None:
    assert nearest_rank(values, q) == expected
    assert percentile(list(reversed(values)), q) == expected


def test_every_report_uses_the_same_definition() -> None:
    values = [6, 1, 5, 2, 4, 3]
    found = percentiles(values)
    assert found["p50"] == percentile(values, 0.5) == 3
    assert found["p99"] == percentile(values, 0.99) == 6

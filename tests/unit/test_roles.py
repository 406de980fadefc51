"""Which inner partitions a node reads (``node.owned_partitions``)."""

from __future__ import annotations

import re

import pytest

from chronos.errors import ConfigError
from chronos.node.roles import owned_partitions


def test_no_configured_partitions_means_all_of_them() -> None:
    assert owned_partitions([], 4) == [0, 1, 2, 3]


def test_configured_partitions_are_sorted_once_each() -> None:
    assert owned_partitions([3, 1, 3], 4) == [1, 3]


@pytest.mark.parametrize(("configured", "missing"), [([0, 4], "[4]"), ([-1, 2, 9], "[-1, 9]")])
def test_partitions_the_topic_lacks_are_refused_by_name(
    configured: list[int], missing: str
) -> None:
    expected = rf"owned_partitions {re.escape(missing)} do not exist.*has 4 partitions"
    with pytest.raises(ConfigError, match=expected):
        owned_partitions(configured, 4)

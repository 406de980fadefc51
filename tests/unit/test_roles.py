"""Which inner partitions a node reads (``node.owned_partitions``)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from chronos.errors import ConfigError
from chronos.node.partitions import owned_partitions, thread_shares
from chronos.settings import NodeSettings


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


@pytest.mark.parametrize(
    ("owned", "threads", "shares"),
    [([1, 2, 3], 2, [[1, 3], [2]]), ([0, 1, 2, 3], 1, [[0, 1, 2, 3]]), ([5], 4, [[5]])],
)
def test_ingest_threads_share_the_owned_partitions_round_robin(
    owned: list[int], threads: int, shares: list[list[int]]
) -> None:
    assert thread_shares(owned, threads) == shares


def test_a_negative_partition_is_refused_when_settings_load() -> None:
    with pytest.raises(ValidationError, match="owned_partitions"):
        NodeSettings(owned_partitions=[0, -1])

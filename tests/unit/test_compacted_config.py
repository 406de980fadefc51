"""What a compacted inner topic needs (``kafka/compacted_config.py``): exactly ``compact``,
tombstones kept at least a minute; the cleaner's settings and LogAppendTime advised; ``fix``
sets only what is missing or worse."""

from __future__ import annotations

import pytest

from chronos.kafka import compacted_config
from chronos.kafka.topic_config import advice_for, problems_for
from chronos.settings import RebuildSettings

COMPACT = RebuildSettings(mode="compact")


def _kafka(**overrides: str) -> dict[str, str]:
    """What Apache Kafka answers for a topic chronos created in compact mode."""
    config = {
        "cleanup.policy": "compact",
        "delete.retention.ms": "120000",
        "min.cleanable.dirty.ratio": "0.1",
        "max.compaction.lag.ms": "60000",
        "segment.bytes": str(16 * 1024 * 1024),
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": "604800000",
        "retention.bytes": "-1",
    }
    config.update({name.replace("_", "."): value for name, value in overrides.items()})
    return config


def test_the_topic_chronos_creates_has_no_problem_and_no_advice() -> None:
    created = compacted_config.creation_config()
    assert compacted_config.problems(created) == [] and compacted_config.advice(created) == []
    assert problems_for(_kafka(), COMPACT) == [] and advice_for(_kafka(), COMPACT) == []
    assert compacted_config.wanted(_kafka()) == {}


@pytest.mark.parametrize("policy", ["delete", "compact,delete", "[compact, delete]"])
def test_a_policy_that_deletes_is_refused_and_fixed(policy: str) -> None:
    config = _kafka(cleanup_policy=policy)
    [problem] = problems_for(config, COMPACT)
    assert f"cleanup.policy={policy}" in problem and "not exactly compact" in problem
    assert compacted_config.wanted(config) == {"cleanup.policy": "compact"}


def test_the_refresh_mode_refuses_what_compact_mode_wants() -> None:
    assert problems_for(_kafka(), RebuildSettings()) != []
    assert problems_for(_kafka(cleanup_policy="delete"), RebuildSettings()) == []


@pytest.mark.parametrize(("value", "refused"), [("59999", True), ("60000", False), ("x", True)])
def test_tombstones_kept_under_a_minute_are_refused(value: str, refused: bool) -> None:
    config = _kafka(delete_retention_ms=value)
    assert bool(compacted_config.problems(config)) is refused
    assert ("delete.retention.ms" in compacted_config.wanted(config)) is refused


def test_a_lazy_cleaner_and_create_time_are_advice_that_fix_sets() -> None:
    config = _kafka(
        max_compaction_lag_ms="9223372036854775807",
        min_cleanable_dirty_ratio="0.5",
        message_timestamp_type="CreateTime",
    )
    assert compacted_config.problems(config) == []
    assert len(advice_for(config, COMPACT)) == 3
    assert compacted_config.wanted(config) == {
        "max.compaction.lag.ms": "60000",
        "min.cleanable.dirty.ratio": "0.1",
        "message.timestamp.type": "LogAppendTime",
    }
    smaller = _kafka(segment_bytes="1048576", max_compaction_lag_ms="1000")
    assert compacted_config.wanted(smaller) == {}, "a more eager cleaner is kept"

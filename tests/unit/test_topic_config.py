"""The inner topic's deletion settings: which configurations could remove a pending message's
record before its refresh (``chronos.kafka.topic_config.inner_topic_problems``)."""

from __future__ import annotations

import pytest

from chronos.kafka.config_values import timestamp_advice
from chronos.kafka.topic_config import (
    inner_topic_problems,
    required_retention_ms,
)

#: rebuild.refresh_interval_s's default: one day, so retention.ms must be at least 2 days.
DAY_S = 86_400.0
TWO_DAYS_MS = 172_800_000


def _config(**overrides: str) -> dict[str, str]:
    """What Apache Kafka answers for a topic ensure_topics created (defaults included)."""
    config = {
        "cleanup.policy": "delete",
        "retention.bytes": "-1",
        "retention.ms": "604800000",
        "max.message.bytes": "1065536",
        "segment.bytes": "1073741824",
    }
    config.update({name.replace("_", "."): value for name, value in overrides.items()})
    return config


def test_kafka_defaults_with_delete_and_no_size_limit_are_safe() -> None:
    assert inner_topic_problems(_config(), DAY_S) == []


def test_retention_of_exactly_twice_the_refresh_interval_is_safe() -> None:
    assert inner_topic_problems(_config(retention_ms=str(TWO_DAYS_MS)), DAY_S) == []


def test_retention_one_millisecond_shorter_is_refused_naming_value_and_requirement() -> None:
    problems = inner_topic_problems(_config(retention_ms=str(TWO_DAYS_MS - 1)), DAY_S)
    assert len(problems) == 1
    assert problems[0].startswith(
        f"retention.ms={TWO_DAYS_MS - 1} on the inner topic is shorter than 2 x "
        f"rebuild.refresh_interval_s ({TWO_DAYS_MS} ms"
    )
    assert "could be removed before it is refreshed" in problems[0]


def test_the_example_of_a_short_retention() -> None:
    [problem] = inner_topic_problems(_config(retention_ms="20000"), DAY_S)
    assert "retention.ms=20000" in problem
    assert "172800000 ms" in problem


def test_infinite_retention_is_safe() -> None:
    assert inner_topic_problems(_config(retention_ms="-1"), DAY_S) == []


@pytest.mark.parametrize("value", ["0", "-2", "soon"])
def test_retention_that_is_neither_minus_one_nor_long_enough_is_refused(value: str) -> None:
    [problem] = inner_topic_problems(_config(retention_ms=value), DAY_S)
    assert problem.startswith(f"retention.ms={value} ")


def test_the_requirement_follows_the_refresh_interval_rounded_up() -> None:
    assert required_retention_ms(2.0) == 4000
    assert required_retention_ms(0.0004) == 1  # 0.8 ms: never rounded down to too short
    assert inner_topic_problems(_config(retention_ms="4000"), 2.0) == []
    assert len(inner_topic_problems(_config(retention_ms="3999"), 2.0)) == 1


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact", "[compact]"])
def test_compaction_alone_or_with_delete_is_refused(policy: str) -> None:
    [problem] = inner_topic_problems(_config(cleanup_policy=policy), DAY_S)
    assert problem.startswith(f"cleanup.policy={policy} on the inner topic is not exactly delete")
    assert "duplicate add" in problem


@pytest.mark.parametrize("policy", ["delete", "Delete", " delete ", "[delete]"])
def test_delete_however_written_is_safe(policy: str) -> None:
    assert inner_topic_problems(_config(cleanup_policy=policy), DAY_S) == []


def test_an_empty_policy_is_refused() -> None:
    [problem] = inner_topic_problems(_config(cleanup_policy=""), DAY_S)
    assert problem.startswith("cleanup.policy= on the inner topic is not exactly delete")


@pytest.mark.parametrize("size", ["0", "1073741824", "unlimited"])
def test_a_size_limit_is_refused(size: str) -> None:
    [problem] = inner_topic_problems(_config(retention_bytes=size), DAY_S)
    assert problem.startswith(f"retention.bytes={size} on the inner topic is not -1")
    assert "size-based deletion" in problem


def test_every_problem_is_named_at_once() -> None:
    config = _config(
        cleanup_policy="compact,delete", retention_bytes="1000000", retention_ms="20000"
    )
    problems = inner_topic_problems(config, DAY_S)
    assert [p.split("=")[0] for p in problems] == [
        "cleanup.policy",
        "retention.bytes",
        "retention.ms",
    ]


def test_a_setting_the_broker_did_not_report_is_a_problem() -> None:
    problems = inner_topic_problems({"max.message.bytes": "1065536"}, DAY_S)
    assert len(problems) == 3
    assert all("not reported by the broker" in p for p in problems)


def test_tiered_storage_settings_are_ignored() -> None:
    config = _config(**{"local.retention.ms": "1000", "local.retention.bytes": "1000"})
    assert inner_topic_problems(config, DAY_S) == []


def test_producers_times_on_the_inner_topic_are_advice_not_a_problem() -> None:
    """CreateTime loses nothing (the gate waits for its probes): the node starts, advised."""
    create_time = _config(message_timestamp_type="CreateTime")
    assert inner_topic_problems(create_time, DAY_S) == []
    (advice,) = timestamp_advice(create_time)
    assert advice.startswith("message.timestamp.type=CreateTime on the inner topic")
    assert timestamp_advice(_config(message_timestamp_type="LogAppendTime")) == []
    assert timestamp_advice(_config()) == []  # not reported (Tansu): nothing to say

"""``kafka/admin.py`` against an admin client that answers as Apache Kafka did under load."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from chronos.errors import ConfigError
from chronos.kafka.admin import stable_end


class _Offsets:
    """Answers ``list_offsets`` with ``errors`` first, then offset 42."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked = 0

    def list_offsets(self, wanted: dict[TopicPartition, Any], **_kw: Any) -> dict[Any, Any]:
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        answer: Future[Any] = Future()
        answer.set_result(type("Offset", (), {"offset": 42})())
        return dict.fromkeys(wanted, answer)


def test_a_progress_topic_without_its_leader_yet_is_asked_again() -> None:
    """A topic created a moment ago answered NOT_LEADER_FOR_PARTITION once on a loaded Kafka
    (a replica's start failed with it). Mutant caught: no second question."""
    admin = _Offsets(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert stable_end(cast(AdminClient, admin), "ns.progress.g", timeout_s=5) == 42
    assert admin.asked == 3


def test_a_refusal_is_not_asked_again() -> None:
    admin = _Offsets(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(ConfigError, match="cannot read where ns.progress.g ends"):
        stable_end(cast(AdminClient, admin), "ns.progress.g", timeout_s=5)
    assert admin.asked == 1

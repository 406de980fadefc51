"""A member's reader of the progress logs fetches once per ``cluster.progress_linger_ms``
while records wait (``ProgressLogs``): every committed transaction of any member answers its
fetch, so under load it fetched once per commit of the whole cluster."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Message, TopicPartition

from chronos.group.follower import READER_OPTIONS
from chronos.group.standbys import ProgressLogs
from chronos.kafka.librdkafka import ClientErrors
from chronos.settings import KafkaValue


class IdleConsumer:
    """A consumer with nothing to read; keeps what it was built with."""

    def __init__(self, options: Mapping[str, KafkaValue]) -> None:
        self.options = dict(options)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        pass

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        pass

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return partitions

    def poll(self, timeout: float = 0.0) -> Message | None:
        return None

    def consume(self, num_messages: int = 1, timeout: float = 0.0) -> list[Message]:
        return []

    def close(self) -> None:
        pass


def _built(linger_ms: int) -> IdleConsumer:
    built: list[IdleConsumer] = []

    def open_consumer(
        group_id: str, errors: ClientErrors, overrides: Mapping[str, KafkaValue] | None = None
    ) -> IdleConsumer:
        built.append(IdleConsumer(overrides or {}))
        return built[-1]

    ProgressLogs("g", open_consumer, ClientErrors("standbys"), ("node-log", 2), linger_ms=linger_ms)
    return built[0]


def test_the_progress_reader_fetches_once_per_linger_while_records_wait() -> None:
    options = _built(100).options
    assert options["queued.min.messages"] == 1
    assert options["fetch.queue.backoff.ms"] == 100
    assert options["isolation.level"] == READER_OPTIONS["isolation.level"]  # still committed only


def test_without_a_linger_the_progress_reader_fetches_at_once() -> None:
    options = _built(0).options
    assert "fetch.queue.backoff.ms" not in options
    assert options == dict(READER_OPTIONS)

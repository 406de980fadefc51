"""A member's ingest waits for more records only while they flow (``ReaderSpec.linger_s``):
under load a read gathers several fetches into one batch, and a fetch carries a linger's
records; a lone record is never held."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Message

from chronos.kafka.clients import LONG_POLL_MS, KafkaClients
from chronos.names import TopicNames
from chronos.node.inner_reader import InnerReader, ReaderSpec
from chronos.runtime.member_host import ingest_spec
from chronos.settings import ChronosSettings, ClusterSettings, LimitSettings
from tests.unit.test_inner_gaps import NOW, TOPIC, FakeConsumer

LINGER_S = 0.02


class TimedConsumer(FakeConsumer):
    """Records how long each ``consume`` was allowed to wait."""

    def __init__(self, offsets: dict[int, list[int]]) -> None:
        super().__init__(offsets, skip={})
        self.waits: list[float] = []

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.waits.append(timeout)
        return super().consume(num_messages, timeout)


class Reader(InnerReader):
    def __init__(self, consumer: TimedConsumer, linger_s: float) -> None:
        spec = ReaderSpec(
            {}, TOPIC, [0], LimitSettings(), TopicNames("chronos"), 4, 0.0, linger_s=linger_s
        )
        super().__init__(spec, lambda: NOW)
        self.fake = consumer

    def _open_consumer(self) -> Consumer:
        return self.fake  # type: ignore[return-value]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("chronos.node.inner_reader.time.monotonic", fake.monotonic)
    return fake


def test_a_read_waits_for_more_only_while_records_flow(clock: Clock) -> None:
    consumer = TimedConsumer({0: list(range(20))})
    reader = Reader(consumer, LINGER_S)
    reader.open({})
    assert len(reader.read(0).items) == 4  # nothing flowed before it: takes what is there
    clock.now += LINGER_S / 2
    assert len(reader.read(0).items) == 4  # the last read ended a moment ago: waits
    clock.now += 2 * LINGER_S
    assert len(reader.read(0).items) == 4  # a linger passed since: a lone record again
    assert consumer.waits == [0.0, LINGER_S, 0.0]


def test_without_a_linger_a_read_never_waits(clock: Clock) -> None:
    consumer = TimedConsumer({0: list(range(20))})
    reader = Reader(consumer, 0.0)
    reader.open({})
    for _ in range(3):
        assert len(reader.read(0).items) == 4
    assert consumer.waits == [0.0, 0.0, 0.0]


def _member_spec(linger_ms: int, restoring: bool) -> ReaderSpec:
    settings = ChronosSettings(cluster=ClusterSettings(ingest_linger_ms=linger_ms))
    clients = KafkaClients(settings.kafka, "test")
    return ingest_spec(settings, clients, [0, 1], restoring=restoring)


def test_a_members_ingest_fetches_once_per_linger_while_records_wait() -> None:
    """The fetch side of the linger (``kafka.clients.lingering_fetch``): librdkafka backs a
    partition off for the linger while anything waits in the consumer's queue."""
    spec = _member_spec(20, restoring=False)
    config = spec.consumer_config
    assert config["queued.min.messages"] == 1
    assert config["fetch.queue.backoff.ms"] == 20
    assert config["fetch.wait.max.ms"] == LONG_POLL_MS  # at rest: the long poll, as before
    assert spec.linger_s == 0.02


def test_a_restore_and_a_zero_linger_fetch_at_once() -> None:
    """A restore reads a backlog: it fetches again as soon as its queue is drained."""
    for spec in (_member_spec(20, restoring=True), _member_spec(0, restoring=False)):
        assert "queued.min.messages" not in spec.consumer_config
        assert "fetch.queue.backoff.ms" not in spec.consumer_config

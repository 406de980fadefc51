"""A member's ingest waits for more records only while they flow (``ReaderSpec.linger_s``):
under load a read gathers several fetches into one batch; a lone record is never held."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Message

from chronos.names import TopicNames
from chronos.node.inner_reader import InnerReader, ReaderSpec
from chronos.settings import LimitSettings
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

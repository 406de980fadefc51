"""The inner reader never skips silently: a jump of offsets is read again before it is taken."""

from __future__ import annotations

from confluent_kafka import Consumer, Message, TopicPartition

from chronos import wire
from chronos.model import DelayMessage
from chronos.names import TopicNames
from chronos.node.inner_reader import InnerReader, ReaderSpec
from chronos.settings import LimitSettings

NOW = 1_700_000_000_000
TOPIC = "chronos.inner"


def _record(partition: int, offset: int) -> Message:
    key, value, headers = wire.encode_add(
        DelayMessage(f"m{partition}-{offset}", "orders", None, b"v", [], NOW + 60_000)
    )
    return Message(
        topic=TOPIC,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        headers=headers,  # type: ignore[arg-type]  # the stub's list is invariant
        timestamp=(1, NOW),
    )


class FakeConsumer:
    """Partitions holding records at some offsets (missing ones are markers); ``skip`` makes
    the first pass over a partition jump from one offset to another, as Tansu did."""

    def __init__(self, offsets: dict[int, list[int]], skip: dict[int, tuple[int, int]]) -> None:
        self.offsets = offsets
        self.skip = dict(skip)
        self.position_of: dict[int, int] = {}
        self.seeks: list[tuple[int, int]] = []

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]:
        present = self.offsets[tp.partition]
        return 0, (present[-1] + 1 if present else 0)

    def assign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.position_of[tp.partition] = max(tp.offset, 0)

    def _next(self, partition: int) -> Message | None:
        end = self.offsets[partition][-1] + 1 if self.offsets[partition] else 0
        position = self.position_of[partition]
        jump = self.skip.get(partition)
        if jump is not None and position >= jump[0]:
            del self.skip[partition]
            position = jump[1]
        while position < end and position not in self.offsets[partition]:
            position += 1  # a marker: the position moves past it, no record shows it
        self.position_of[partition] = position
        if position >= end:
            return None
        self.position_of[partition] = position + 1
        return _record(partition, position)

    def poll(self, timeout: float) -> Message | None:
        for partition in sorted(self.position_of):
            record = self._next(partition)
            if record is not None:
                return record
        return None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        out: list[Message] = []
        while len(out) < num_messages:
            record = self.poll(0)
            if record is None:
                break
            out.append(record)
        return out

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(TOPIC, tp.partition, self.position_of[tp.partition]) for tp in partitions
        ]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.partition, tp.offset))
        self.position_of[tp.partition] = tp.offset

    def close(self) -> None:
        pass


class Reader(InnerReader):
    def __init__(
        self, consumer: FakeConsumer, partitions: list[int], trust_gaps: bool = False
    ) -> None:
        spec = ReaderSpec(
            {}, TOPIC, partitions, LimitSettings(), TopicNames("chronos"), 4, 0.0, trust_gaps
        )
        super().__init__(spec, lambda: NOW)
        self.fake = consumer

    def _open_consumer(self) -> Consumer:
        return self.fake  # type: ignore[return-value]


def _read_all(reader: Reader, reads: int = 40) -> list[str]:
    ids: list[str] = []
    for _ in range(reads):
        ids += [item[1] for item in reader.read(0).items]
    return ids


def test_a_skipped_range_is_read_again_and_nothing_is_lost_or_doubled() -> None:
    consumer = FakeConsumer({0: list(range(20))}, skip={0: (5, 12)})
    reader = Reader(consumer, [0])
    reader.open({})
    ids = _read_all(reader)
    assert ids == [f"m0-{o}" for o in range(20)]
    assert consumer.seeks == [(0, 5)] and reader.rereads == 1 and reader.gaps_accepted == 0


def test_a_marker_is_taken_as_a_real_gap_after_one_read_again() -> None:
    consumer = FakeConsumer({0: [0, 1, 2, 4, 5, 6]}, skip={})
    reader = Reader(consumer, [0])
    reader.open({})
    ids = _read_all(reader)
    assert ids == [f"m0-{o}" for o in (0, 1, 2, 4, 5, 6)]
    assert consumer.seeks == [(0, 3)] and reader.gaps_accepted == 1


def test_each_partition_is_checked_on_its_own() -> None:
    consumer = FakeConsumer({0: list(range(8)), 1: list(range(8))}, skip={1: (2, 6)})
    reader = Reader(consumer, [0, 1])
    reader.open({0: 0, 1: 0})
    ids = _read_all(reader)
    assert sorted(ids) == sorted(f"m{p}-{o}" for p in (0, 1) for o in range(8))
    assert len(ids) == 16
    assert consumer.seeks == [(1, 2)]


def test_a_skip_at_the_end_is_not_reported_as_read() -> None:
    """Idle, the position past records never handed out must not count as applied (the cancel
    gate and catching up trust positions)."""
    consumer = FakeConsumer({0: list(range(10))}, skip={0: (6, 10)})
    reader = Reader(consumer, [0])
    reader.open({0: 0})
    first = reader.read(0)
    assert [i[1] for i in first.items] == [f"m0-{o}" for o in range(4)]
    second = reader.read(0)  # 4, 5, then the jump to the end: nothing past 6 returned
    assert [i[1] for i in second.items] == ["m0-4", "m0-5"]
    idle = reader.read(0)
    assert idle.positions == {0: 6}  # not 10
    ids = _read_all(reader)
    assert ids == [f"m0-{o}" for o in range(6, 10)]


def test_a_compacted_topics_gaps_are_trusted_without_reading_them_again() -> None:
    """Compact mode (Apache Kafka): the cleaner leaves gaps everywhere; each read again
    would cost a seek and a fetch of records already read."""
    present = [0, 3, 4, 9, 10, 11, 17]
    consumer = FakeConsumer({0: present}, skip={})
    reader = Reader(consumer, [0], trust_gaps=True)
    reader.open({})
    assert _read_all(reader) == [f"m0-{o}" for o in present]
    assert consumer.seeks == [] and reader.rereads == 0 and reader.gaps_accepted == 3

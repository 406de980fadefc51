"""The readiness board: what each node said it could deliver, and for how long it counts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import TopicPartition

from chronos.cluster.readiness import ReadinessBoard, decode, encode
from chronos.group.follower import ProgressConsumer
from chronos.kafka.librdkafka import ClientErrors


@dataclass
class Record:
    k: bytes
    v: bytes | None

    def error(self) -> None:
        return None

    def key(self) -> bytes:
        return self.k

    def value(self) -> bytes | None:
        return self.v


@dataclass
class FakeConsumer:
    pending: list[Record] = field(default_factory=list)
    assigned: list[TopicPartition] = field(default_factory=list)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions

    def poll(self, timeout: float = -1) -> Any:
        return self.pending.pop(0) if self.pending else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        out, self.pending = self.pending[:num_messages], self.pending[num_messages:]
        return out

    def close(self) -> None:
        pass


def _board(consumer: FakeConsumer, said: list[tuple[bytes, bytes]]) -> ReadinessBoard:
    return ReadinessBoard(
        node_id="a",
        topic="status",
        consumer=cast(ProgressConsumer, consumer),
        errors=ClientErrors("readiness", None),
        produce=lambda key, value: said.append((key, value)),
        ready_now=lambda: frozenset({1, 2}),
        interval_s=60.0,
        stale_after_s=60.0,
    )


def test_a_node_counts_as_ready_only_for_what_it_said_after_the_time_asked_about() -> None:
    consumer, said = FakeConsumer(), list[tuple[bytes, bytes]]()
    board = _board(consumer, said)
    board.step()
    assert said == [(b"a", encode(frozenset({1, 2})))]
    assert board.ready("a", 1) and not board.ready("a", 3)
    before = time.monotonic()
    consumer.pending = [Record(b"b", encode(frozenset({5})))]
    board.step()
    assert board.ready("b", 5) and not board.ready("b", 6)
    assert board.ready("b", 5, since=before)
    assert not board.ready("b", 5, since=time.monotonic()), "a word older than the takeover"
    consumer.pending = [Record(b"b", None)]
    board.step()
    assert not board.ready("b", 5)


def test_a_record_this_release_cannot_read_says_nothing() -> None:
    assert decode(b'{"v": 9}') is None and decode(None) is None
    assert decode(encode(frozenset({3, 1}))) == frozenset({1, 3})

"""One ListOffsets for every replica of a process (``kafka/shared_ends.py``)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from chronos.kafka.shared_ends import SharedEnds
from tests.clocks import ManualClock


@dataclass
class Offset:
    offset: int


@dataclass
class FakeAdmin:
    """Answers ListOffsets with ``ends``; records each request's partitions."""

    ends: dict[tuple[str, int], int]
    requests: list[set[tuple[str, int]]] = field(default_factory=list)
    fail: bool = False

    def list_offsets(self, wanted: dict[TopicPartition, Any], **_: Any) -> dict[Any, Any]:
        if self.fail:
            raise KafkaException("broker gone")
        self.requests.append({(tp.topic, tp.partition) for tp in wanted})
        out: dict[TopicPartition, Future[Offset]] = {}
        for tp in wanted:
            future: Future[Offset] = Future()
            future.set_result(Offset(self.ends[(tp.topic, tp.partition)]))
            out[tp] = future
        return out


def _shared(admin: FakeAdmin, clock: ManualClock, opened: list[int]) -> SharedEnds:
    def open_admin() -> AdminClient:
        opened.append(1)
        return cast(AdminClient, admin)

    return SharedEnds(open_admin, 1.0, committed=False, max_age_s=0.08, now=clock)


def test_replicas_asking_within_the_age_share_one_request_covering_all_of_them() -> None:
    admin = FakeAdmin({("progress.p0", 0): 5, ("progress.p1", 0): 7, ("inner", 1): 9})
    clock, opened = ManualClock(), list[int]()
    shared = _shared(admin, clock, opened)
    first, second = shared.asker("progress.p0", [0]), shared.asker("progress.p1", [0])
    assert first() == {0: 5}
    assert second() == {0: 7}  # not asked before: asked now, with the first's partition
    assert len(admin.requests) == 2 and admin.requests[-1] == {
        ("progress.p0", 0),
        ("progress.p1", 0),
    }
    admin.ends[("progress.p0", 0)] = 6
    assert first() == {0: 5} and second() == {0: 7}
    assert len(admin.requests) == 2, "a fresh answer was asked again"
    clock.now += 0.1
    assert first() == {0: 6} and second() == {0: 7}
    assert len(admin.requests) == 3


def test_a_failed_question_raises_and_the_next_asks_with_a_new_client() -> None:
    admin = FakeAdmin({("t", 0): 1})
    clock, opened = ManualClock(), list[int]()
    ask = _shared(admin, clock, opened).asker("t", [0])
    assert ask() == {0: 1}
    admin.fail = True
    clock.now += 1
    with pytest.raises(KafkaException):
        ask()
    admin.fail = False
    assert ask() == {0: 1} and len(opened) == 2


def test_a_partition_nobody_asks_about_any_more_is_dropped_from_the_request() -> None:
    admin = FakeAdmin({("a", 0): 1, ("b", 0): 2})
    clock, opened = ManualClock(), list[int]()
    shared = _shared(admin, clock, opened)
    shared.asker("a", [0])()
    ask_b = shared.asker("b", [0])
    ask_b()
    clock.now += 11
    ask_b()
    assert admin.requests[-1] == {("b", 0)}

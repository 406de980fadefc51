"""The membership worker: Kafka's member list read back, and kept when Kafka does not answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.cluster.membership import GroupDescriber, Membership
from chronos.kafka.librdkafka import ClientErrors
from chronos.settings import KafkaValue


class _Consumer:
    def __init__(self) -> None:
        self.subscribed: list[str] = []
        self.closed = False

    def subscribe(self, topics: list[str]) -> None:
        self.subscribed = topics

    def poll(self, timeout: float) -> Any:
        return None

    def close(self) -> None:
        self.closed = True


def test_a_description_kafka_does_not_answer_keeps_the_last_member_list() -> None:
    """An unanswered describe (a TimeoutError from the admin future, or a KafkaException)
    changes nothing: placement does not flap on a slow coordinator. Mutant caught: only
    KafkaException caught (the timeout escaped the step, and with it every later ask of that
    step's tick)."""
    answers: list[frozenset[str] | BaseException] = [
        frozenset({"a", "b"}),
        TimeoutError(),
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        frozenset({"a"}),
    ]
    consumer = _Consumer()
    changes: list[frozenset[str]] = []

    def describe() -> frozenset[str]:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def open_consumer(group: str, errors: ClientErrors, options: Mapping[str, KafkaValue]) -> Any:
        assert options["partition.assignment.strategy"] == "cooperative-sticky"
        return consumer

    membership = Membership(
        node_id="a",
        topic="topic",
        group="group",
        options={},
        open_consumer=open_consumer,
        errors=ClientErrors("test"),
        describe=describe,
        interval_s=0.0,
        on_change=changes.append,
    )
    for _ in range(4):
        membership.step()
    assert consumer.subscribed == ["topic"]
    assert changes == [frozenset({"a", "b"}), frozenset({"a"})]
    assert membership.members == frozenset({"a"})
    membership.finish()
    assert consumer.closed


class _Described:
    def __init__(self, members: list[str]) -> None:
        self.members = [type("M", (), {"client_id": m})() for m in members]


class _Future:
    def __init__(self, answer: _Described | BaseException) -> None:
        self._answer = answer

    def result(self, timeout: float) -> _Described:
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer


class _Admin:
    def __init__(self, answers: list[_Described | BaseException]) -> None:
        self.answers = answers
        self.asked = 0

    def describe_consumer_groups(self, group_ids: list[str]) -> dict[str, Any]:
        self.asked += 1
        return {group_ids[0]: _Future(self.answers.pop(0))}


def test_a_description_that_failed_drops_its_admin_client() -> None:
    """librdkafka#4605: an admin client with a coordinator request pending across a broker
    restart aborts the process. Mutant caught: the client kept after a timeout (its request
    still pending when the broker comes back)."""
    made: list[_Admin] = []
    answers: list[_Described | BaseException] = [
        _Described(["a", "b"]),
        _Described(["a"]),
        TimeoutError(),
        _Described(["b"]),
    ]

    def new_admin() -> _Admin:
        made.append(_Admin(answers))
        return made[-1]

    describe = GroupDescriber(new_admin, "g", 1.0)
    assert describe() == frozenset({"a", "b"})
    assert describe() == frozenset({"a"})
    with pytest.raises(TimeoutError):
        describe()
    assert describe() == frozenset({"b"})
    assert [admin.asked for admin in made] == [3, 1]

"""``kafka/admin.py`` against an admin client that answers as Apache Kafka did under load."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from chronos.errors import ConfigError
from chronos.kafka.admin import RenewedAdmin, stable_end


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


class _Admins:
    """Makes a distinct stand-in client per call and keeps them in order (``made``)."""

    def __init__(self) -> None:
        self.made: list[object] = []

    def __call__(self) -> AdminClient:
        self.made.append(object())
        return cast(AdminClient, self.made[-1])


def _asked_failing(renewed: RenewedAdmin, code: int) -> None:
    """``renewed`` asked a question whose every answer is Kafka's error ``code``."""

    def fails(_client: AdminClient) -> int:
        raise KafkaException(KafkaError(code))

    with pytest.raises(KafkaException):
        renewed.ask(fails)


def test_a_renewed_admin_is_made_anew_after_a_failed_question() -> None:
    """After a broker restart librdkafka's metadata cache kept answering FENCED_LEADER_EPOCH
    for minutes: a member's claims failed for 2 minutes. A failed question drops the client.
    Mutants caught: the client kept after a failure, a new client for every question."""
    open_admin = _Admins()
    made = open_admin.made
    renewed = RenewedAdmin(open_admin)
    assert renewed.ask(lambda client: made.index(client)) == 0
    assert renewed.ask(lambda client: made.index(client)) == 0, "kept while it answers"
    _asked_failing(renewed, KafkaError._TRANSPORT)
    assert len(made) == 1, "a broker away: not asked again at once"
    assert renewed.ask(lambda client: made.index(client)) == 1, "a new one after the failure"


def test_a_stale_answer_is_asked_again_at_once_of_a_new_client() -> None:
    """After each broker restart of a broker-kill run, every member's first claim round read
    FENCED_LEADER_EPOCH for a progress log's end (raised as ConfigError from stable_end),
    and waited for the next round. Mutants caught: no second question; a third."""
    open_admin = _Admins()
    made = open_admin.made

    def stale_once(client: AdminClient) -> int:
        if made.index(client) == 0:
            admin = _Offsets(KafkaError.FENCED_LEADER_EPOCH)
            return stable_end(cast(AdminClient, admin), "ns.progress.g", timeout_s=5)
        return made.index(client)

    renewed = RenewedAdmin(open_admin)
    assert renewed.ask(stale_once) == 1
    _asked_failing(renewed, KafkaError.FENCED_LEADER_EPOCH)
    assert len(made) == 3, "asked of one new client, not more"

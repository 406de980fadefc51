"""How the client reports records Kafka did not acknowledge (``proxy/client.py``'s ``_Acks``):
the producer's own timeout and the client's wait are the same unknown outcome, whichever ends
first; a refusal is named as one."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from chronos.errors import NotAcknowledged, ValidationError
from proxy.client import _Acks

UNKNOWN = r"Kafka did not acknowledge within [0-9.]+ s; the outcome is unknown"


def _acks(*answers: KafkaError | None, expected: int | None = None) -> _Acks:
    noted: list[KafkaError] = []
    acks = _Acks(len(answers) if expected is None else expected, noted.append)
    for answer in answers:
        acks(answer)
    return acks


def test_every_record_acknowledged_returns() -> None:
    _acks(None, None).wait(5.0)


def test_the_producers_timeout_is_reported_as_the_waits_own() -> None:
    """Both give up after ``proxy.ack_timeout_s``; on a loaded machine librdkafka's timer
    ended the wait first, and the user read "Kafka refused 1 record(s): _MSG_TIMED_OUT" for a
    Kafka nobody listened on (CI under stress-ng). Mutant caught: any error a refusal."""
    with pytest.raises(NotAcknowledged, match=UNKNOWN):
        _acks(KafkaError(KafkaError._MSG_TIMED_OUT)).wait(5.0)


def test_the_wait_timing_out_is_an_unknown_outcome() -> None:
    with pytest.raises(NotAcknowledged, match=UNKNOWN):
        _acks(None, expected=2).wait(0.0)  # one record never answered


def test_a_refusal_is_named_before_timeouts() -> None:
    acks = _acks(
        KafkaError(KafkaError._MSG_TIMED_OUT),
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        None,
    )
    with pytest.raises(NotAcknowledged, match="Kafka refused 1 record"):
        acks.wait(5.0)
    too_large = _acks(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), expected=2)
    with pytest.raises(ValidationError, match="Kafka refused the size"):
        too_large.wait(0.0)  # refused, though another record is still unanswered

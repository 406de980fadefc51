"""librdkafka errors classified by what chronos should do about them."""

from __future__ import annotations

from confluent_kafka import KafkaError

# Retrying cannot help: the record or the topic itself is wrong. Such records are dead-lettered.
# Codes without a named constant in confluent-kafka are given as numbers.
_RECORD_LIST_TOO_LARGE = 18
_POLICY_VIOLATION = 44
_PERMANENT = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.INVALID_RECORD,
        _RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        _POLICY_VIOLATION,
        KafkaError._INVALID_ARG,
    }
)


def is_permanent(error: KafkaError) -> bool:
    """True when the record can never be delivered as it is (dead-letter it)."""
    return error.code() in _PERMANENT


def describe(error: KafkaError) -> str:
    """A short, stable reason string for headers and logs."""
    return f"{error.name()}: {error.str()}"

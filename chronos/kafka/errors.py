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


# The producer's idempotence state (producer id, epoch, sequence) is broken: only a new
# producer can deliver again. After an outage longer than message.timeout.ms librdkafka bumps
# its epoch itself; Apache Kafka accepts that, Tansu 0.6 answers PRODUCER_FENCED for good.
_PRODUCER_STATE = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError._FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
        KafkaError.INVALID_PRODUCER_ID_MAPPING,
        KafkaError._FATAL,
    }
)


# Failures of the cluster or the connection, not of one record: retried for as long as they last.
_OUTAGE = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        # A producer whose idempotence state the broker refuses (see needs_new_producer) is
        # replaced; what it had in flight or queued is purged and retried on the new one.
        *_PRODUCER_STATE,
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
    }
)


def is_outage(error: KafkaError) -> bool:
    """True when the error is about reaching Kafka, not about this record."""
    return error.code() in _OUTAGE


def needs_new_producer(error: KafkaError) -> bool:
    """True when the producer that reported ``error`` can never deliver again."""
    return error.fatal() or error.code() in _PRODUCER_STATE


def is_permanent(error: KafkaError) -> bool:
    """True when the record can never be delivered as it is (dead-letter it)."""
    return error.code() in _PERMANENT


def describe(error: KafkaError) -> str:
    """A short, stable reason string for headers and logs."""
    return f"{error.name()}: {error.str()}"

"""One classification of Kafka errors, by what chronos should do about them.

Every component asks :func:`classify` and acts on the kind; none keeps its own list of codes.
What a kind means for one record (dead-letter it or retry) is the dead-letter policy's decision
(``chronos/delivery/deadletter.py``); what it means for a client is said below.
"""

from __future__ import annotations

from enum import Enum

from confluent_kafka import KafkaError

from chronos.errors import ChronosError


class ErrorKind(Enum):
    """What an error is about."""

    #: chronos' credentials lack a right (a topic, the group, the transactional id, the
    #: cluster) or were refused. No retry helps: the node ends with the reason. On a target
    #: topic it concerns that record only, which is dead-lettered.
    AUTHORIZATION = "authorization"
    #: This producer instance can never deliver again: another one took over its
    #: transactional id, or its idempotence state broke. An idempotent publisher is replaced;
    #: a master's transactional one ends its term (the node becomes a backup).
    FENCED = "fenced"
    #: Kafka is unreachable or slow, or a record was purged from a replaced producer: retried
    #: for as long as it lasts; says nothing about the record.
    OUTAGE = "outage"
    #: The record can never be delivered as it is (too large, no such topic, invalid):
    #: dead-lettered at once.
    RECORD = "record"
    #: Anything else: retried with backoff, dead-lettered after ``delivery.give_up_after_s``.
    OTHER = "other"


# Codes without a named constant in confluent-kafka are given as numbers.
_RECORD_LIST_TOO_LARGE = 18
_POLICY_VIOLATION = 44

_AUTHORIZATION = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
    }
)

# The producer's idempotence state (producer id, epoch, sequence) is broken, or another producer
# fenced it. After an outage longer than message.timeout.ms librdkafka bumps its epoch itself;
# Apache Kafka accepts that, Tansu 0.6 answers PRODUCER_FENCED for good.
_FENCED = frozenset(
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

_RECORD = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.INVALID_RECORD,
        _RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_EXCEPTION,
        _POLICY_VIOLATION,
        KafkaError._INVALID_ARG,
    }
)

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
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._PURGE_QUEUE,
        KafkaError._PURGE_INFLIGHT,
    }
)


def classify(error: KafkaError) -> ErrorKind:
    """The kind of ``error``. Authorization first: librdkafka marks some of those fatal, and
    a fatal error is otherwise a fenced producer."""
    code = error.code()
    if code in _AUTHORIZATION:
        return ErrorKind.AUTHORIZATION
    if code in _FENCED or error.fatal():
        return ErrorKind.FENCED
    if code in _RECORD:
        return ErrorKind.RECORD
    if code in _OUTAGE:
        return ErrorKind.OUTAGE
    return ErrorKind.OTHER


def describe(error: KafkaError) -> str:
    """A short, stable reason string for headers and logs."""
    return f"{error.name()}: {error.str()}"


class Fenced(ChronosError):
    """This transactional producer may not deliver any more: another master fenced it, Kafka
    aborted its transaction, or it failed fatally."""


class NotAuthorized(ChronosError):
    """Kafka refuses chronos an operation it cannot work without; the node ends with this."""

    def __init__(self, what: str, error: KafkaError | str) -> None:
        reason = describe(error) if isinstance(error, KafkaError) else error
        super().__init__(
            f"{what}: {reason} (grant chronos' Kafka principal this right, or fix its "
            "credentials; retrying cannot help)"
        )


class TransactionAborted(ChronosError):
    """A transaction Kafka refused in a way that needs an abort; its range is tried again."""

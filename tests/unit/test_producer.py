"""The idempotent publisher replaces a producer the broker will not take records from again;
every Kafka error has one kind."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.devstack.tansu import free_port
from chronos.kafka.errors import ErrorKind, Fenced, classify
from chronos.kafka.librdkafka import TRANSACTION_FAILED, TransactionFailures
from chronos.kafka.publishers.idempotent import IdempotentPublisher
from chronos.kafka.publishers.transactional import TransactionalProducer
from chronos.logs import LIBRDKAFKA


def test_a_fenced_producer_is_replaced_and_its_records_purged_for_retry() -> None:
    # Nobody listens there: the record waits in the producer's queue.
    delivery = IdempotentPublisher({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, "test")
    outcome: list[KafkaError | None] = []
    done = threading.Event()

    def on_done(error: KafkaError | None, _msg: Any = None) -> None:
        outcome.append(error)
        done.set()

    delivery.start()
    try:
        before = delivery._producer
        delivery.publish("t", b"k", b"v", [], on_done)
        delivery.note_error(KafkaError(KafkaError.PRODUCER_FENCED))
        assert done.wait(10), "the purged record never reported back"
        assert delivery._producer is not before
        (error,) = outcome
        assert error is not None and error.code() == KafkaError._PURGE_QUEUE
        assert classify(error) is ErrorKind.OUTAGE, "a purged record is retried, not dead-lettered"
        deadline = time.monotonic() + 5
        while delivery.in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert delivery.in_flight() == 0  # the old producer is let go once it reported back
    finally:
        delivery._stop.set()


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (KafkaError.PRODUCER_FENCED, ErrorKind.FENCED),
        (KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorKind.FENCED),
        (KafkaError.INVALID_PRODUCER_EPOCH, ErrorKind.FENCED),
        (KafkaError._MSG_TIMED_OUT, ErrorKind.OUTAGE),
        (KafkaError._TRANSPORT, ErrorKind.OUTAGE),
        (KafkaError._PURGE_INFLIGHT, ErrorKind.OUTAGE),
        (KafkaError.MSG_SIZE_TOO_LARGE, ErrorKind.RECORD),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, ErrorKind.RECORD),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, ErrorKind.AUTHORIZATION),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorKind.AUTHORIZATION),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, ErrorKind.AUTHORIZATION),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, ErrorKind.AUTHORIZATION),
        (KafkaError._AUTHENTICATION, ErrorKind.AUTHORIZATION),
        (KafkaError.KAFKA_STORAGE_ERROR, ErrorKind.OTHER),
    ],
)
def test_each_error_has_one_kind(code: int, kind: ErrorKind) -> None:
    assert classify(KafkaError(code)) is kind


def test_an_authorization_error_librdkafka_marks_fatal_is_still_authorization() -> None:
    """Counted as "fenced", a refused transactional id became a takeover retried every second
    for ever instead of a clear exit."""
    error = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal=True)
    assert classify(error) is ErrorKind.AUTHORIZATION
    assert classify(KafkaError(KafkaError._FATAL, fatal=True)) is ErrorKind.FENCED


class _BrokenFlush:
    """A producer whose flush serves a delivery callback with a fatal error still set, as
    confluent-kafka does for a producer that just failed fatally."""

    def __init__(self, cause: BaseException) -> None:
        self._cause = cause

    def flush(self, _timeout_s: float) -> int:
        raise SystemError("<function _noted> returned a result with an exception set") from (
            self._cause
        )


@pytest.mark.parametrize(
    ("cause", "reason"),
    [
        (
            KafkaException(KafkaError(KafkaError.INVALID_TXN_STATE, "broke", fatal=True)),
            "INVALID_TXN_STATE: broke",
        ),
        (RuntimeError("not a Kafka error"), "the producer failed fatally while flushing"),
    ],
)
def test_a_fatal_flush_names_its_cause(cause: BaseException, reason: str) -> None:
    """The fencing's reason is the error that was set, not the callback it reached (the logs
    said "failed fatally while flushing" for a broker restart and a fencing alike)."""
    publisher = TransactionalProducer(
        {"bootstrap.servers": f"127.0.0.1:{free_port()}", "transactional.id": "t"}, "t", 1.0
    )
    try:
        publisher._producer = _BrokenFlush(cause)  # type: ignore[assignment]
        with pytest.raises(Fenced, match=reason):
            publisher.flush(0.1)
    finally:
        publisher._producer = None


def test_a_transactional_producers_log_notes_only_librdkafkas_failed_transaction(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its lines still reach chronos' librdkafka logger; only the abortable failure's is
    noted (a broker's disconnect, at error level too, is no transaction's failure)."""
    failures = TransactionFailures()
    bump = "skipped sequence numbers (OUT_OF_ORDER_SEQUENCE_NUMBER, requires epoch bump)"
    with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA):
        failures.log(logging.ERROR, "%s [%s] %s", "FAIL", "p#1", "Disconnected")
        failures.log(logging.DEBUG, "%s [%s] %s", TRANSACTION_FAILED, "p#1", f"Ignoring {bump}")
        # A refused record's failure: librdkafka purges the rest, whose answers end the
        # flush by themselves; the refusal is judged as the record's own.
        failures.log(logging.ERROR, "%s [%s] %s", TRANSACTION_FAILED, "p#1", "too large")
        assert failures.reason is None
        failures.log(logging.ERROR, "%s [%s] %s", TRANSACTION_FAILED, "p#1", f"failed: {bump}")
    assert failures.reason == f"failed: {bump}"
    assert [r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA][0] == (
        "FAIL [p#1] Disconnected"
    )
    failures.clear()
    assert failures.reason is None


class _Aborts:
    """A producer whose aborts answer ``errors`` in turn, then succeed."""

    def __init__(self, *errors: KafkaError) -> None:
        self.errors = list(errors)
        self.asked = 0

    def abort_transaction(self, _timeout_s: float) -> None:
        self.asked += 1
        if self.errors:
            raise KafkaException(self.errors.pop(0))

    def begin_transaction(self) -> None:
        pass


def test_an_abort_unanswered_for_the_transaction_timeout_ends_the_producer() -> None:
    """After a broker's restart an abort asked again reached the coordinator 6-8 s later
    than a new producer would have; by then Kafka aborts the transaction itself and fences
    this producer anyway. Mutants caught: the abort asked again; later calls let through."""
    publisher = TransactionalProducer(
        {"bootstrap.servers": f"127.0.0.1:{free_port()}", "transactional.id": "t"}, "t", 1.0
    )
    aborts = _Aborts(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))
    try:
        publisher._producer = aborts  # type: ignore[assignment]
        with pytest.raises(Fenced, match="not answered in 1 s"):
            publisher.abort()
        assert aborts.asked == 1
        with pytest.raises(Fenced, match="not answered"):
            publisher.begin()
    finally:
        publisher._producer = None


def test_an_abort_that_fails_otherwise_retriably_is_asked_again() -> None:
    publisher = TransactionalProducer(
        {"bootstrap.servers": f"127.0.0.1:{free_port()}", "transactional.id": "t"}, "t", 1.0
    )
    busy = KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True)
    aborts = _Aborts(busy)
    try:
        publisher._producer = aborts  # type: ignore[assignment]
        publisher.abort()
        assert aborts.asked == 2
        publisher.begin()
    finally:
        publisher._producer = None

"""Delivery replaces a producer the broker will not take records from again."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import KafkaError

from chronos.devstack.tansu import free_port
from chronos.kafka.errors import is_outage, needs_new_producer
from chronos.kafka.producer import Delivery


def test_a_fenced_producer_is_replaced_and_its_records_purged_for_retry() -> None:
    # Nobody listens there: the record waits in the producer's queue.
    delivery = Delivery({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, name="test")
    outcome: list[KafkaError | None] = []
    done = threading.Event()

    def on_done(error: KafkaError | None, _msg: Any = None) -> None:
        outcome.append(error)
        done.set()

    delivery.start()
    try:
        before = delivery._producer
        delivery.send("t", b"k", b"v", [], on_done)
        delivery.note_error(KafkaError(KafkaError.PRODUCER_FENCED))
        assert done.wait(10), "the purged record never reported back"
        assert delivery._producer is not before
        (error,) = outcome
        assert error is not None and error.code() == KafkaError._PURGE_QUEUE
        assert is_outage(error), "a purged record must be retried, not dead-lettered"
        deadline = time.monotonic() + 5
        while delivery.in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert delivery.in_flight() == 0  # the old producer is let go once it reported back
    finally:
        delivery._stop.set()


def test_which_errors_need_a_new_producer() -> None:
    assert needs_new_producer(KafkaError(KafkaError.PRODUCER_FENCED))
    assert needs_new_producer(KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER))
    assert not needs_new_producer(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not needs_new_producer(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))

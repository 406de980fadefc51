"""Sender: acknowledgements, retries off the queue, dead letters, giving up (fake producer)."""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import pytest
from confluent_kafka import KafkaError

from chronos.clock import FakeClock
from chronos.kafka.producer import Delivery
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.node.deadletter import DeadLetters
from chronos.node.job import DeliveryJob
from chronos.node.progress import ProgressTracker
from chronos.node.sender import RetrySchedule, Sender
from chronos.settings import DeliverySettings
from chronos.store import keys
from chronos.types import Headers
from chronos.wire import H_DLQ_REASON, H_DLQ_TARGET, H_DLQ_TRUNCATED, H_ID

T0 = 1_700_000_000_000


@dataclass
class Sent:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    on_done: Callable[[KafkaError | None], None]


@dataclass
class FakeDelivery:
    """Records what is produced; the test decides each outcome."""

    sent: list[Sent] = field(default_factory=list)
    noted: list[KafkaError] = field(default_factory=list)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_done: Callable[[KafkaError | None], None],
    ) -> None:
        self.sent.append(Sent(topic, key, value, headers, on_done))

    def note_error(self, error: KafkaError) -> None:
        self.noted.append(error)

    def in_flight(self) -> int:
        """Records not yet answered; this fake's tests answer by hand, so none are waited for."""
        return 0


@dataclass
class Env:
    clock: FakeClock
    delivery: FakeDelivery
    tracker: ProgressTracker
    retries: RetrySchedule
    jobs: queue.Queue[list[DeliveryJob]]
    metrics: CountingMetrics
    sender: Sender


@pytest.fixture
def env() -> Env:
    clock, delivery, metrics = FakeClock(T0), FakeDelivery(), CountingMetrics()
    tracker, retries = ProgressTracker(0, metrics, clock), RetrySchedule()
    jobs: queue.Queue[list[DeliveryJob]] = queue.Queue()
    dead = DeadLetters(cast(Delivery, delivery), "ns.deadletter", metrics)
    settings = DeliverySettings(
        retry_backoff_initial_ms=100, retry_backoff_max_ms=1000, give_up_after_s=5
    )
    sender = Sender(
        0,
        jobs,
        retries,
        cast(Delivery, delivery),
        dead,
        tracker,
        clock,
        settings,
        metrics,
    )
    return Env(clock, delivery, tracker, retries, jobs, metrics, sender)


def job(message_id: str = "m1") -> DeliveryJob:
    message = DelayMessage(message_id, "orders", b"k", b"v", [("h", b"1")], T0)
    return DeliveryJob(keys.message_key(T0, message_id), message, T0)


def test_acknowledged_job_completes(env: Env) -> None:
    first = job()
    env.tracker.dispatched([first])
    env.jobs.put([first])
    env.sender.step()
    (sent,) = env.delivery.sent
    assert (sent.topic, sent.key, sent.value) == ("orders", b"k", b"v")
    assert ("h", b"1") in sent.headers and (H_ID, b"m1") in sent.headers
    assert not first.done
    sent.on_done(None)
    assert first.done and first.message is None  # the payload is dropped at once
    env.tracker.scanned_through(T0)
    assert env.tracker.collect() == (T0, [])
    assert env.metrics.totals()["delivered"] == 1


def test_transient_error_retries_with_backoff_without_blocking_others(env: Env) -> None:
    failing, other = job("fail"), job("other")
    env.jobs.put([failing])
    env.sender.step()
    env.delivery.sent[0].on_done(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not failing.done and len(env.retries) == 1
    env.jobs.put([other])
    env.sender.step()  # the retry is not due yet; the other message goes out
    assert [dict(s.headers)[H_ID] for s in env.delivery.sent] == [b"fail", b"other"]
    env.clock.advance(100)
    env.sender.step()
    assert len(env.delivery.sent) == 3 and env.delivery.sent[2].topic == "orders"
    env.delivery.sent[2].on_done(None)
    assert failing.done


def test_permanent_error_is_dead_lettered_with_reason_and_target(env: Env) -> None:
    doomed = job()
    env.jobs.put([doomed])
    env.sender.step()
    env.delivery.sent[0].on_done(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert len(env.delivery.sent) == 1  # nothing is produced from inside a callback
    env.sender.step()
    dead = env.delivery.sent[1]
    assert dead.topic == "ns.deadletter" and dead.value == b"v"
    headers = dict(dead.headers)
    assert headers[H_DLQ_TARGET] == b"orders"
    assert b"MSG_SIZE_TOO_LARGE" in (headers[H_DLQ_REASON] or b"")
    assert not doomed.done  # done only once the dead-letter topic acknowledged
    dead.on_done(None)
    assert doomed.done and env.metrics.totals()["dead_lettered"] == 1


def test_dead_letter_refused_for_size_is_resent_without_value_and_never_dropped(env: Env) -> None:
    doomed = job()
    env.jobs.put([doomed])
    env.sender.step()
    env.delivery.sent[-1].on_done(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    env.sender.step()
    env.delivery.sent[-1].on_done(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))  # DLQ refuses too
    env.sender.step()
    truncated = env.delivery.sent[-1]
    assert truncated.value is None and truncated.key == b"k"
    truncated_sizes = cast(bytes, dict(truncated.headers)[H_DLQ_TRUNCATED])
    assert truncated_sizes.startswith(b"value=1 key=1 headers=")
    assert ("h", b"1") in truncated.headers
    truncated.on_done(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not doomed.done, "completed without any acknowledgement"
    env.clock.advance(1_000)
    env.sender.step()
    env.delivery.sent[-1].on_done(None)
    assert doomed.done


def test_outage_errors_are_retried_past_the_give_up_time(env: Env) -> None:
    waiting = job()
    env.jobs.put([waiting])
    env.sender.step()
    for _ in range(5):
        env.delivery.sent[-1].on_done(KafkaError(KafkaError._TRANSPORT))
        env.clock.advance(10_000)  # well past give_up_after_s=5
        env.sender.step()
    assert all(sent.topic == "orders" for sent in env.delivery.sent)
    env.delivery.sent[-1].on_done(None)
    assert waiting.done


def test_gives_up_on_a_record_specific_error_after_the_configured_time(env: Env) -> None:
    stuck = job()
    env.jobs.put([stuck])
    env.sender.step()
    env.delivery.sent[-1].on_done(KafkaError(KafkaError.KAFKA_STORAGE_ERROR))
    env.clock.advance(6_000)
    env.sender.step()  # retry is due: produced again, fails again, now past give-up
    env.delivery.sent[-1].on_done(KafkaError(KafkaError.KAFKA_STORAGE_ERROR))
    env.sender.step()
    dead = env.delivery.sent[-1]
    assert dead.topic == "ns.deadletter"
    assert (dict(dead.headers)[H_DLQ_REASON] or b"").startswith(b"gave up after 2 attempts")


def test_lateness_of_a_late_arrival_counts_from_when_it_was_stored(env: Env) -> None:
    """deliver_at_ms=0 is stored at the frontier (its slot): lateness from the slot, not 1970."""
    message = DelayMessage("past", "orders", None, b"v", [], 0)
    overdue = DeliveryJob(keys.message_key(T0 - 5, "past"), message, 0)
    env.tracker.dispatched([overdue])
    env.jobs.put([overdue])
    env.sender.step()
    assert env.metrics.summaries()["send_lateness_ms"]["max"] == 5


def test_a_stopping_sender_retries_what_waits_for_a_retry(env: Env) -> None:
    """A job left in the retries holds the seek: everything delivered after it would be
    delivered again at the next start (SIGTERM during a burst)."""
    waiting, later = job("waiting"), job("later")
    env.tracker.dispatched([waiting, later])
    env.jobs.put([waiting, later])
    env.sender.step()
    env.delivery.sent[0].on_done(KafkaError(KafkaError._MSG_TIMED_OUT))  # to the retries
    env.delivery.sent[1].on_done(None)
    env.sender.stop()
    env.sender.finish()
    assert [dict(s.headers)[H_ID] for s in env.delivery.sent] == [b"waiting", b"later", b"waiting"]
    env.delivery.sent[2].on_done(None)
    env.tracker.scanned_through(T0)
    assert env.tracker.collect()[0] == T0  # the seek passes both


def test_a_fenced_producer_is_reported_and_the_job_retried_not_dead_lettered(env: Env) -> None:
    """After an outage Tansu fences librdkafka's epoch bump for good: the producer is replaced
    (Delivery.note_error) and the job goes out again on the new one."""
    fenced = job()
    env.tracker.dispatched([fenced])
    env.jobs.put([fenced])
    env.sender.step()
    env.clock.advance(10_000)  # past give_up_after_s: still not dead-lettered
    env.delivery.sent[0].on_done(KafkaError(KafkaError.PRODUCER_FENCED))
    assert [e.code() for e in env.delivery.noted] == [KafkaError.PRODUCER_FENCED]
    env.clock.advance(1_000)
    env.sender.step()
    assert env.delivery.sent[-1].topic == "orders"  # retried on its target
    assert fenced.dead_reason is None

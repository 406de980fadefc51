"""Sender threads: produce due jobs to their target topics, retry, or dead-letter them."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from functools import partial
from typing import Any

import structlog
from confluent_kafka import KafkaError

from chronos.clock import Clock
from chronos.delivery.attempts import Attempts, AttemptsRecord
from chronos.delivery.deadletter import (
    NOT_YET,
    UNKNOWN_TOPIC_CONFIRM_S,
    DeadLetterPolicy,
    DeadLetters,
    Failure,
    Refusal,
    TopicMissing,
    job_record,
)
from chronos.delivery.job import DeliveryJob
from chronos.delivery.pacing import Pacing
from chronos.kafka.errors import describe
from chronos.kafka.publisher import Publisher
from chronos.lifecycle import LoopWorker
from chronos.logs import Throttle
from chronos.metrics import Metrics
from chronos.node.progress import ProgressTracker
from chronos.types import EpochMs
from chronos.wire import delivery_headers

log = structlog.get_logger(__name__)

JobQueue = queue.Queue[list[DeliveryJob]]

_IDLE_WAIT_S = 0.2
_DRAIN_PAUSE_S = 0.05
#: Least wait for the next held job of a topic with a rate.
_RELEASE_TICK_S = 0.002


class RetrySchedule:
    """Jobs waiting to be produced again, earliest first; shared by all senders.

    A failing job waits here instead of in the queue, so it never blocks unrelated messages.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[EpochMs, int, DeliveryJob]] = []
        self._seq = itertools.count()

    def add(self, job: DeliveryJob, at_ms: EpochMs) -> None:
        with self._lock:
            heapq.heappush(self._heap, (at_ms, next(self._seq), job))

    def pop_due(self, now_ms: EpochMs) -> list[DeliveryJob]:
        """Jobs whose retry time has come."""
        due: list[DeliveryJob] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now_ms:
                due.append(heapq.heappop(self._heap)[2])
        return due

    def next_due_ms(self) -> EpochMs | None:
        """When the earliest waiting retry is due, None when none waits."""
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def pop_all(self) -> list[DeliveryJob]:
        """Every waiting job, due or not (a stopping sender tries them all once more)."""
        with self._lock:
            jobs = [entry[2] for entry in sorted(self._heap)]
            self._heap.clear()
        return jobs

    def __len__(self) -> int:
        return len(self._heap)


class Sender(LoopWorker):
    """Takes batches from the queue and produces them; results go to the tracker.

    Parameters:
        index: sender number, for the thread name.
        jobs: the bounded queue filled by the push worker.
        retries: shared retry schedule.
        publisher: the idempotent publisher.
        dead_letters: where dead letters go.
        policy: when a job goes to the dead-letter topic (shared with a master's loop).
        tracker: told when a job is acknowledged (on its target or as a dead letter).
        clock: time source.
        metrics: counters and lateness.
        attempts: where failed attempts are kept for the status lookup.
        pacing: holds messages of topics with a rate (shared by the senders); None: none
            ever has one (tests, benchmarks).
        drain_timeout_s: longest a stopping sender keeps retrying (half of
            ``node.shutdown_timeout_s``: the producer's flush and the last progress follow).
    """

    def __init__(
        self,
        *,
        index: int,
        jobs: JobQueue,
        retries: RetrySchedule,
        publisher: Publisher,
        dead_letters: DeadLetters,
        policy: DeadLetterPolicy,
        tracker: ProgressTracker,
        clock: Clock,
        metrics: Metrics,
        attempts: Attempts | None = None,
        pacing: Pacing | None = None,
        drain_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(f"sender-{index}")
        self._jobs = jobs
        self._retries = retries
        self._retry_log = Throttle()
        self._publisher = publisher
        self._dead = dead_letters
        self._policy = policy
        self._tracker = tracker
        self._clock = clock
        self._metrics = metrics
        self._attempts = attempts
        self._pacing = pacing
        self._drain_timeout_s = drain_timeout_s

    def step(self) -> None:
        now = self._clock.now_ms()
        for job in self._retries.pop_due(now):
            self.send(job, now)
        pacing = self._pacing
        if pacing is not None:
            for job in pacing.release(now):
                self.send(job, now, paced=True)
        # Block on the queue until the next retry is due (at most _IDLE_WAIT_S): no busy polling
        # when idle, and a retry never waits long behind an empty queue.
        next_retry = self._retries.next_due_ms()
        timeout = _IDLE_WAIT_S if next_retry is None else (next_retry - now) / 1000.0
        if pacing is not None:
            release_in = pacing.next_release_s()
            if release_in is not None:
                # Held jobs go out a few at a time: a wake-up per token (5,000 a second at a
                # rate of 5,000) cost more than the delivery.
                timeout = min(timeout, max(release_in, _RELEASE_TICK_S))
        try:
            batch = self._jobs.get(timeout=min(max(timeout, 0.001), _IDLE_WAIT_S))
        except queue.Empty:
            return
        now = self._clock.now_ms()
        # One sample per batch: its first job is the most overdue (batches are in key order).
        self._metrics.observe("send_lateness_ms", now - batch[0].lateness_base_ms)
        send = self.send
        for job in batch:
            send(job, now)

    def finish(self) -> None:
        """Drain the queue and the retries until Kafka answered everything, within
        ``drain_timeout_s``: a job left unacknowledged holds the seek where it is, and every
        message delivered after it would be delivered again at the next start."""
        deadline = time.monotonic() + self._drain_timeout_s
        while True:
            now = self._clock.now_ms()
            sent = 0
            while True:
                try:
                    batch = self._jobs.get_nowait()
                except queue.Empty:
                    break
                for job in batch:
                    self.send(job, now)
                sent += len(batch)
            for job in self._retries.pop_all():
                self.send(job, now)
                sent += 1
            held = 0
            if self._pacing is not None:
                for job in self._pacing.release(now):
                    self.send(job, now, paced=True)
                    sent += 1
                held = self._pacing.held()
            if not (sent or held or len(self._retries)) and self._publisher.in_flight() == 0:
                return
            if time.monotonic() >= deadline:
                log.error(
                    "sender_drain_incomplete",
                    sender=self.name,
                    retries=len(self._retries),
                    held_by_rate=held,
                    in_flight=self._publisher.in_flight(),
                    effect="the seek stops at the first of them: they and what follows them "
                    "are delivered again at the next start",
                )
                return
            # Let acknowledgements (and failures, which land in the retries) come back.
            time.sleep(_DRAIN_PAUSE_S)

    def send(self, job: DeliveryJob, now_ms: EpochMs, paced: bool = False) -> None:
        """Produce one job to its target, or to the dead-letter topic once it has a reason;
        a first attempt to a topic with a rate may wait for it (``paced``: it did)."""
        if job.done:
            return
        pacing = self._pacing
        if (
            pacing is not None
            and not paced
            and job.first_attempt_ms == 0  # a retry or a dead letter is not paced again
            and job.dead_reason is None
            and pacing.active
        ):
            message = job.message
            if message is not None and not pacing.admit(job, message.topic, now_ms):
                return
        if job.dead_reason is None:
            reason = self._policy.reason_before(job)
            if reason is NOT_YET:
                self._retries.add(job, now_ms + round(UNKNOWN_TOPIC_CONFIRM_S * 1000))
                return
            if isinstance(reason, TopicMissing):  # a failed attempt, as its policy retries
                if job.first_attempt_ms == 0:
                    job.first_attempt_ms = now_ms
                job.attempts += 1
                self._on_error(job, reason.error)
                return
            if reason is not None:
                self._dead_letter_reason(job, str(reason))
        if job.first_attempt_ms == 0:
            job.first_attempt_ms = now_ms
        job.attempts += 1
        message = job.message
        if message is None or job.dead_reason is not None:
            self._send_dead_letter(job)
            return
        job.on_error = self._on_error
        self._publisher.publish(
            message.topic,
            message.key,
            message.value,
            delivery_headers(message, job.due_ms, job.skipped),
            job,  # its own callback: see DeliveryJob
        )

    # Failures arrive on the producer's poll thread: they only update state and schedule; every
    # produce happens on a sender thread.

    def _on_error(self, job: DeliveryJob, error: KafkaError) -> None:
        self._publisher.note_error(error)  # a fenced producer is replaced; the job is retried
        now = self._clock.now_ms()
        message = job.message
        topic = None if message is None else message.topic
        failure = Failure(topic, job.due_ms, job.first_attempt_ms, job.attempts, now)
        reason = self._policy.reason_after(error, failure)
        if reason is not None:
            self._noted(job, error, now, None)
            self._dead_letter_reason(job, reason)
            job.attempts = 0
            self._retries.add(job, now)
            return
        self._metrics.incr("retried")
        retry_at = now + self._policy.retry_delay_ms(topic, job.attempts)
        self._noted(job, error, now, retry_at)
        described = describe(error)
        # When the broker goes, every job in flight fails at once (87 lines in one second):
        # one line per error and 10 s, with how many were held back (``retried`` counts all).
        held = self._retry_log.admit(described)
        if held is not None:
            log.warning(
                "delivery_retry",
                id=None if message is None else message.id,
                error=described,
                attempt=job.attempts,
                repeated=held,
            )
        self._retries.add(job, retry_at)

    def _noted(
        self, job: DeliveryJob, error: KafkaError, now: EpochMs, retry_at: EpochMs | None
    ) -> None:
        """Keep the failed attempt for the status lookup."""
        message = job.message
        if self._attempts is not None and message is not None:
            record = AttemptsRecord(job.attempts, describe(error), now, retry_at)
            self._attempts.failed(message.id, record)

    @staticmethod
    def _dead_letter_reason(job: DeliveryJob, reason: str) -> None:
        log.error(
            "delivery_dead_lettered", id=job.message.id if job.message else None, reason=reason
        )
        job.dead_reason = reason

    def _send_dead_letter(self, job: DeliveryJob) -> None:
        reason = job.dead_reason or "undecodable stored message"
        key, value, headers, source, target = job_record(job)
        self._dead.send(
            key,
            value,
            headers,
            reason=reason,
            source=source,
            target=target,
            truncate=job.dlq_truncated,
            on_result=partial(self._on_dead_letter_result, job),
        )

    def _on_dead_letter_result(
        self, job: DeliveryJob, error: KafkaError | None, _msg: Any = None
    ) -> None:
        if error is None:
            self._tracker.completed(job)
            return
        if self._dead.refused(error, job.dlq_truncated) is Refusal.SHRINK:
            job.dlq_truncated = True  # most likely too large: send the shrunk form
            self._retries.add(job, self._clock.now_ms())
            return
        # Never complete without an acknowledgement: the seek waits (loudly) rather than pass
        # a message that went nowhere.
        log.critical(
            "dead_letter_retry",
            id=job.message.id if job.message else None,
            error=describe(error),
            attempt=job.attempts,
        )
        delay = self._policy.retry_delay_ms(None, job.attempts)
        self._retries.add(job, self._clock.now_ms() + delay)

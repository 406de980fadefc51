"""Sender threads: produce due jobs to their target topics, retry, or dead-letter them."""

from __future__ import annotations

import heapq
import itertools
import queue
import threading

import structlog
from confluent_kafka import KafkaError

from chronos.clock import Clock
from chronos.kafka.errors import describe, is_permanent
from chronos.kafka.producer import Delivery
from chronos.metrics import Metrics
from chronos.node.component import LoopWorker
from chronos.node.deadletter import DeadLetters
from chronos.node.job import DeliveryJob
from chronos.node.progress import ProgressTracker
from chronos.settings import DeliverySettings
from chronos.types import EpochMs
from chronos.wire import delivery_headers

log = structlog.get_logger(__name__)

JobQueue = queue.Queue[list[DeliveryJob]]

_IDLE_WAIT_S = 0.5


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

    def __len__(self) -> int:
        return len(self._heap)


class Sender(LoopWorker):
    """Takes batches from the queue and produces them; results go to the tracker.

    Parameters:
        index: sender number, for the thread name.
        jobs: the bounded queue filled by the push worker.
        retries: shared retry schedule.
        delivery: the producer.
        dead_letters: where permanent failures go.
        tracker: told when a job is acknowledged (on its target or as a dead letter).
        clock: time source.
        settings: retry backoff and give-up time.
        metrics: counters and lateness.
    """

    def __init__(
        self,
        index: int,
        jobs: JobQueue,
        retries: RetrySchedule,
        delivery: Delivery,
        dead_letters: DeadLetters,
        tracker: ProgressTracker,
        clock: Clock,
        settings: DeliverySettings,
        metrics: Metrics,
    ) -> None:
        super().__init__(f"sender-{index}")
        self._jobs = jobs
        self._retries = retries
        self._delivery = delivery
        self._dead = dead_letters
        self._tracker = tracker
        self._clock = clock
        self._settings = settings
        self._metrics = metrics

    def step(self) -> None:
        now = self._clock.now_ms()
        for job in self._retries.pop_due(now):
            self.send(job)
        # Block on the queue until the next retry is due (at most _IDLE_WAIT_S): no busy polling
        # when idle, and a retry never waits long behind an empty queue.
        next_retry = self._retries.next_due_ms()
        timeout = _IDLE_WAIT_S if next_retry is None else (next_retry - now) / 1000.0
        try:
            batch = self._jobs.get(timeout=min(max(timeout, 0.001), _IDLE_WAIT_S))
        except queue.Empty:
            return
        for job in batch:
            self.send(job)

    def finish(self) -> None:
        # Drain what the push worker already queued; its acks still advance the seek.
        while True:
            try:
                batch = self._jobs.get_nowait()
            except queue.Empty:
                return
            for job in batch:
                self.send(job)

    def send(self, job: DeliveryJob) -> None:
        """Produce one job (or dead-letter it when it is known to be undeliverable)."""
        if job.done:
            return
        if job.first_attempt_ms == 0:
            job.first_attempt_ms = self._clock.now_ms()
        job.attempts += 1
        message = job.message
        if message is None or job.dead_reason is not None:
            self._dead_letter(job, job.dead_reason or "undecodable stored message")
            return
        headers = delivery_headers(message, job.due_ms, job.skipped)
        if job.attempts == 1:
            self._metrics.observe("send_lateness_ms", job.first_attempt_ms - job.due_ms)
        self._delivery.send(
            message.topic,
            message.key,
            message.value,
            headers,
            lambda error: self._on_result(job, error),
        )

    def _on_result(self, job: DeliveryJob, error: KafkaError | None) -> None:
        if error is None:
            self._metrics.incr("delivered")
            self._metrics.observe("ack_lateness_ms", self._clock.now_ms() - job.due_ms)
            self._tracker.completed(job)
            return
        reason = describe(error)
        if is_permanent(error):
            self._dead_letter(job, reason)
            return
        now = self._clock.now_ms()
        if now - job.first_attempt_ms > self._settings.give_up_after_s * 1000:
            self._dead_letter(job, f"gave up after {job.attempts} attempts: {reason}")
            return
        backoff = min(
            self._settings.retry_backoff_initial_ms * 2 ** min(job.attempts - 1, 20),
            self._settings.retry_backoff_max_ms,
        )
        self._metrics.incr("retried")
        log.warning(
            "delivery_retry",
            id=job.message.id if job.message else None,
            error=reason,
            attempt=job.attempts,
            backoff_ms=backoff,
        )
        self._retries.add(job, now + backoff)

    def _dead_letter(self, job: DeliveryJob, reason: str) -> None:
        message = job.message
        log.error("delivery_dead_lettered", id=message.id if message else None, reason=reason)
        if message is None:
            self._dead.send(
                None,
                job.raw,
                [],
                reason=reason,
                source="store:" + job.key.hex(),
                target=None,
                on_done=lambda: self._tracker.completed(job),
            )
            return
        self._dead.send(
            message.key,
            message.value,
            delivery_headers(message, job.due_ms, job.skipped),
            reason=reason,
            source="delivery",
            target=message.topic,
            on_done=lambda: self._tracker.completed(job),
        )

"""The second step of a delivery transaction: publish its plan's records and collect what
Kafka answers (where each landed, which failed).

A record refused at once (too large, ...) is never part of the transaction: the policy judges
it here and, when it gives up, its dead letter goes out in the same transaction. A record
refused in its acknowledgement shows among the failures, which ``commit.py`` judges.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from confluent_kafka import KafkaError

from chronos.delivery.deadletter import (
    UNDECODABLE,
    Before,
    Refusal,
    dead_letter_headers,
    job_record,
    shrink,
    when_dead_letter_refused,
)
from chronos.delivery.job import DeliveryJob
from chronos.group.node_log import NodeLog
from chronos.group.plan import BatchPlan
from chronos.group.verdicts import Verdicts
from chronos.kafka.publisher import TransactionalPublisher
from chronos.metrics import Metrics
from chronos.schedule.progress_record import (
    Cut,
    RepeatState,
    encode_cut,
    encode_node_cut,
    encode_repeat,
)
from chronos.types import EpochMs, Headers
from chronos.wire import delivery_headers

log = structlog.get_logger(__name__)

#: Index of the progress records among a transaction's failures (jobs are 0..n-1).
PROGRESS = -1
#: A record librdkafka dropped from a transaction gone bad, or refused to take into one
#: (``_STATE``): its own fault or another record's, which only Kafka's answer about the
#: topics tells (``Verdicts.judge_purged``).
PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._STATE})


class BatchRecords:
    """One transaction's records, published in its plan's order.

    Parameters:
        publisher: the master's transactional publisher (its transaction begun).
        verdicts: the master's verdicts (a record refused at once is judged).
        dead_letter_topic: where dead letters go.
        metrics: counters.
    """

    def __init__(
        self,
        publisher: TransactionalPublisher,
        verdicts: Verdicts,
        dead_letter_topic: str,
        metrics: Metrics,
    ) -> None:
        self._publisher = publisher
        self._verdicts = verdicts
        self._dead_letter_topic = dead_letter_topic
        self._metrics = metrics
        #: Failures by job index (``PROGRESS`` for the progress records); the first wins.
        self.failures: dict[int, KafkaError] = {}
        #: (partition, offset) of each job's record, by its index.
        self.placed: dict[int, tuple[int, int]] = {}
        #: The cut record's offset, once acknowledged.
        self.cut_at: list[int] = []
        #: Indexes of the jobs that went to their targets, in job order.
        self.targets: list[int] = []
        #: The lateness base of the first of them (None: none).
        self.oldest: EpochMs | None = None

    def publish(
        self,
        plan: BatchPlan,
        moved: list[RepeatState],
        cut_of: Callable[[], Cut],
        progress_topic: str,
        node_cut: tuple[NodeLog, int] | None = None,
    ) -> None:
        """The plan's sends, then the progress: ``moved`` (reschedules) before the plan's
        states (always later ones), and the cut last, made once the sends are out (its
        time is when the transaction's records were produced). ``node_cut`` (a node's log
        and the partition delivered): the cut goes there instead of to ``progress_topic``
        (a cluster node's transaction with no states for that partition)."""
        for send in plan.sends:
            if self._publish_job(send.n, send.job, send.known):
                self.targets.append(send.n)
                if self.oldest is None:
                    self.oldest = send.job.lateness_base_ms
        for state in (*moved, *plan.states):
            key, value = encode_repeat(state)
            self._publish(progress_topic, key, value, [], PROGRESS)
        on_done = partial(_cut_noted, self.failures, self.cut_at)
        if node_cut is None:
            key, value = encode_cut(cut_of())
            self._publisher.publish(progress_topic, key, value, [], on_done)
            return
        node_log, partition = node_cut
        key, value = encode_node_cut(partition, cut_of())
        self._publisher.publish(node_log.topic, key, value, [], on_done, node_log.partition)

    def _publish_job(self, n: int, job: DeliveryJob, known: Before) -> bool:
        """Publish one job to its target or, when ``known`` (the dead-letter reason already
        decided, or the policy's word before trying) says so, to the dead-letter topic. True
        when it went to its target."""
        message = job.message
        reason = None if known is None else str(known)
        failures = self.failures
        if reason is None and message is not None:
            headers = delivery_headers(message, job.due_ms, job.skipped)
            on_result = partial(_placed, n, failures, self.placed)
            self._publisher.publish(message.topic, message.key, message.value, headers, on_result)
            refused = failures.get(n)
            if refused is None:
                return True  # queued: its outcome arrives at the flush
            if refused.code() in PURGED:
                return False  # the transaction went bad before it: the abort asks why
            # Refused at once (too large, ...): never part of the transaction.
            reason = self._verdicts.judge(n, job, refused)
            if reason is None:
                return False  # the flush sees the failure and aborts: tried again
            del failures[n]
        dead = self._verdicts.dead
        dead[job.key] = reason or UNDECODABLE
        self._publish_dead_letter(n, job, dead[job.key])
        return False

    def _publish_dead_letter(self, n: int, job: DeliveryJob, reason: str) -> None:
        message = job.message
        key, value, headers, source, target = job_record(job)
        truncated = None
        shrunk = self._verdicts.shrink
        if job.key in shrunk:
            key, headers, truncated = shrink(key, value, headers)
            value = None
        log.error("delivery_dead_lettered", id=message.id if message else None, reason=reason)
        self._metrics.incr("dead_lettered")
        self._publish(
            self._dead_letter_topic,
            key,
            value,
            dead_letter_headers(headers, reason, source, target, truncated),
            n,
        )
        refused = self.failures.get(n)
        if refused is not None and job.key not in shrunk:
            if when_dead_letter_refused(refused, False) is Refusal.SHRINK:
                del self.failures[n]
                shrunk.add(job.key)
                self._publish_dead_letter(n, job, reason)

    def _publish(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers, n: int
    ) -> None:
        self._publisher.publish(topic, key, value, headers, partial(_noted, n, self.failures))


def _placed(
    n: int,
    failures: dict[int, KafkaError],
    placed: dict[int, tuple[int, int]],
    error: KafkaError | None,
    msg: Any,
) -> None:
    """A delivery's outcome: where it landed (the status lookup's answer), or its failure."""
    if error is None:
        if msg is not None:
            placed[n] = (msg.partition(), msg.offset())
    else:
        failures.setdefault(n, error)


def _cut_noted(
    failures: dict[int, KafkaError], cut_at: list[int], error: KafkaError | None, msg: Any
) -> None:
    """The cut record's outcome: its offset (where a retake reads from), or its failure."""
    if error is not None:
        failures.setdefault(PROGRESS, error)
    elif msg is not None and msg.offset() is not None:
        cut_at.append(msg.offset())


def _noted(n: int, failures: dict[int, KafkaError], error: KafkaError | None, _msg: Any) -> None:
    """A record's outcome: a failure is kept, by the job's index (the first one wins)."""
    if error is not None:
        failures.setdefault(n, error)

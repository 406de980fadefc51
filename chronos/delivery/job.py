"""A delivery job: one occurrence of one stored message on its way to Kafka; and the jobs of
scanned rows, which both delivery modes build the same way."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog
from confluent_kafka import KafkaError

from chronos.errors import DecodeError
from chronos.model import DelayMessage
from chronos.schedule.ledger import Ledger, next_occurrence
from chronos.store import codec, keys
from chronos.types import EpochMs

log = structlog.get_logger(__name__)


@dataclass(slots=True, eq=False)
class DeliveryJob:
    """What the push worker hands the senders, and what the progress tracker waits for.

    Parameters:
        key: the messages key this job came from (slot + id).
        message: the decoded message, its ``occurrence`` set to the one being delivered;
            None when the stored value could not be decoded (then ``raw`` goes to dead letters).
        due_ms: due time of the delivered occurrence.
        skipped: overdue repeat occurrences collapsed into this one.
        followup: the next occurrence to schedule once this one is acknowledged.
        raw: the stored bytes, kept only for undecodable values.
        dead_reason: set when the job must go to the dead-letter topic instead of its target.
        dlq_truncated: the dead-letter topic refused the full record; send it without value.
        on_error: called with (job, error) when producing it failed (set by the sender).
        occurrence: the delivered occurrence, kept when ``message`` is dropped.
        partition: the target partition Kafka acknowledged it on (-1 before).
        offset: its offset there (-1 before); with ``partition``, the status lookup's answer.

    The job is its own delivery callback: librdkafka calls it once Kafka answered. Why not a
    closure per record: on success it only marks itself done (the progress worker collects it),
    which is the whole per-record cost of an acknowledgement.
    """

    key: bytes
    message: DelayMessage | None
    due_ms: EpochMs
    skipped: int = 0
    followup: DelayMessage | None = None
    raw: bytes | None = None
    dead_reason: str | None = None
    dlq_truncated: bool = False
    attempts: int = 0
    first_attempt_ms: EpochMs = 0
    done: bool = False
    on_error: Callable[[DeliveryJob, KafkaError], None] | None = None
    occurrence: int = 1
    partition: int = -1
    offset: int = -1

    @property
    def lateness_base_ms(self) -> EpochMs:
        """What lateness is measured from: the due time, or for a message stored after it was
        already due (a late arrival, ``deliver_at`` in the past), its slot, which is when the
        node stored it. Measuring those from their due time made one ``deliver_at_ms=0`` put
        ~1.8e12 ms into every lateness summary; their count is the ledger's ``late``."""
        return max(self.due_ms, keys.slot_of(self.key))

    def __call__(self, error: KafkaError | None, record: Any = None) -> None:
        if error is None:
            self.done = True
            if record is not None:
                self.partition = record.partition()
                self.offset = record.offset()
            message = self.message
            if message is not None:
                self.occurrence = message.occurrence
            self.message = None  # only key and follow-up are needed from here on
        elif self.on_error is not None:
            self.on_error(self, error)


#: Default of ``delivery.catch_up_window_s``, in ms.
CATCH_UP_WINDOW_MS = 600_000


def jobs_for(
    rows: list[tuple[bytes, bytes]],
    now: EpochMs,
    ledger: Ledger,
    catch_up_window_ms: int = CATCH_UP_WINDOW_MS,
) -> list[DeliveryJob]:
    """Delivery jobs of scanned rows: undecodable ones marked for dead letters, repeats at
    the occurrence their catch-up policy delivers now (``Repeat.due_now``; a rescheduled
    occurrence is itself, at its new due time) with the next one as follow-up, superseded
    repeats done."""
    jobs: list[DeliveryJob] = []
    repeats: list[tuple[int, str]] = []
    for key, raw in rows:
        try:
            message = codec.decode(raw)
        except DecodeError as exc:
            log.error("stored_message_undecodable", key=key.hex(), reason=exc.reason)
            jobs.append(DeliveryJob(key, None, 0, raw=raw, dead_reason=exc.reason))
            continue
        if message.repeat is None:
            jobs.append(DeliveryJob(key, message, message.first_due_ms))
            continue
        if message.moved_due_ms:
            # An occurrence a reschedule moved goes out as itself, at its new time; the
            # schedule resumes after it (``next_occurrence``), catch-up included.
            due = message.moved_due_ms
            jobs.append(DeliveryJob(key, message, due, followup=next_occurrence(message)))
            repeats.append((len(jobs) - 1, message.id))
            continue
        first = message.occurrence
        occurrence, due = message.repeat.due_now(
            message.first_due_ms, first, now, catch_up_window_ms
        )
        current = replace(message, occurrence=occurrence)
        jobs.append(
            DeliveryJob(
                key, current, due, skipped=occurrence - first, followup=next_occurrence(current)
            )
        )
        repeats.append((len(jobs) - 1, message.id))
    if repeats:
        # A repeat key re-scanned after a crash may already have been superseded by its
        # next occurrence (or cancelled): deliver only what the index still schedules.
        current_flags = ledger.is_current([(i, jobs[n].key) for n, i in repeats])
        for (n, _), is_current in zip(repeats, current_flags, strict=True):
            if not is_current:
                jobs[n].followup = None
                jobs[n].done = True
                jobs[n].message = None
                jobs[n].dead_reason = None
    return jobs

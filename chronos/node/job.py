"""A delivery job: one occurrence of one stored message on its way to Kafka."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError

from chronos.model import DelayMessage
from chronos.store import keys
from chronos.types import EpochMs


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

    @property
    def lateness_base_ms(self) -> EpochMs:
        """What lateness is measured from: the due time, or for a message stored after it was
        already due (a late arrival, ``deliver_at`` in the past), its slot, which is when the
        node stored it. Measuring those from their due time made one ``deliver_at_ms=0`` put
        ~1.8e12 ms into every lateness summary; their count is the ledger's ``late``."""
        return max(self.due_ms, keys.slot_of(self.key))

    def __call__(self, error: KafkaError | None, _record: Any = None) -> None:
        if error is None:
            self.done = True
            self.message = None  # only key and follow-up are needed from here on
        elif self.on_error is not None:
            self.on_error(self, error)

"""A delivery job: one occurrence of one stored message on its way to Kafka."""

from __future__ import annotations

from dataclasses import dataclass

from chronos.model import DelayMessage
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

"""Failed delivery attempts per message, kept for the status lookup.

Only the node that delivers sees a delivery fail, and only while it does: the record lives in
memory, the latest :data:`CAPACITY` messages' worth, and a successor after a failover counts
from zero (the ``max_age_s`` of a topic's retry policy counts from the due time, which survives
it). Written only on a failure, so a delivery that succeeds at once costs nothing here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from chronos.types import EpochMs

#: How many messages' attempts are kept (the oldest written is forgotten first).
CAPACITY = 10_000


@dataclass(frozen=True, slots=True)
class AttemptsRecord:
    """What the status lookup says about a message's failed attempts.

    Parameters:
        attempts: failed attempts so far.
        last_error: why the last one failed.
        failed_at_ms: when it failed.
        retry_at_ms: when it is tried again; None once it went to the dead-letter topic.
    """

    attempts: int
    last_error: str
    failed_at_ms: EpochMs
    retry_at_ms: EpochMs | None

    def as_json(self) -> dict[str, object]:
        return {
            "attempts": self.attempts,
            "last_error": self.last_error,
            "failed_at_ms": self.failed_at_ms,
            "retry_at_ms": self.retry_at_ms,
        }


class Attempts:
    """Failed attempts by message id; shared by the delivering threads and the status lookup."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, AttemptsRecord] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, message_id: str, record: AttemptsRecord) -> None:
        """Note a failed attempt (the latest record of an id replaces its earlier one)."""
        with self._lock:
            records = self._records
            records[message_id] = record
            records.move_to_end(message_id)
            while len(records) > self._capacity:
                records.popitem(last=False)

    def of(self, message_id: str) -> AttemptsRecord | None:
        """The latest failed attempt of ``message_id``, None when none is known here."""
        with self._lock:
            return self._records.get(message_id)

    def json_of(self, message_id: str) -> dict[str, object] | None:
        """``of`` as the status lookup shows it."""
        record = self.of(message_id)
        return None if record is None else record.as_json()

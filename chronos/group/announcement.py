"""What each replica says of itself in its group's members topic.

The election group lists only replicas that stand for election; one still restoring its store,
or one whose store cannot prove it is complete, is invisible there, yet it is what an operator
who just replaced a disk wants to watch. So every replica announces its state, on each change
and every ``interval_s``, keyed by its node id in a one-partition compacted topic
(``<namespace>.members.<group>``) that ``chronos group`` reads (``group/status.py``).

An announcement is advisory: nothing decides by it, so it is produced without waiting and a
lost one is replaced by the next.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chronos.clock import Clock
from chronos.types import EpochMs

#: How often a replica says its state when nothing changed; ``chronos group`` takes one older
#: than ``STALE_AFTER_MS`` for a replica that is gone (killed, or cut off from Kafka).
INTERVAL_S = 5.0
STALE_AFTER_MS = 3 * int(INTERVAL_S * 1000)

#: Reading its store back from Kafka, or ingest not caught up with the inner topic yet.
RESTORING = "restoring"
#: Caught up, but its store began after records it would need (waits for a rebuild floor).
INCOMPLETE = "incomplete"
#: Stands for election: may take over.
ELIGIBLE = "eligible"
#: Delivers.
MASTER = "master"
#: Stopped cleanly (its last announcement).
STOPPED = "stopped"


@dataclass(frozen=True)
class Announcement:
    """One replica's state as it last said it.

    Parameters:
        node: its node id.
        state: one of the constants above.
        at_ms: when it said so (its clock).
        detail: what the state depends on (e.g. where its store began and the floor).
    """

    node: str
    state: str
    at_ms: EpochMs
    detail: Mapping[str, Any] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {"state": self.state, "at_ms": self.at_ms, "detail": dict(self.detail)},
            separators=(",", ":"),
        ).encode()


def decode(key: bytes | None, value: bytes | None) -> Announcement | None:
    """An announcement from a members-topic record; None for anything else (a tombstone, a
    record another release wrote differently)."""
    if not key or not value:
        return None
    try:
        fields = json.loads(value)
        return Announcement(
            key.decode(), str(fields["state"]), int(fields["at_ms"]), dict(fields["detail"])
        )
    except (ValueError, KeyError, TypeError):
        return None


#: (key, value): produce one members-topic record, without waiting for Kafka's answer.
Produce = Callable[[bytes, bytes], None]


class Announcer:
    """Says this replica's state when it changes, and again every ``interval_s`` so a reader
    can tell a live replica from one that vanished (``chronos group`` drops announcements
    older than a few intervals)."""

    def __init__(self, node: str, produce: Produce, clock: Clock, interval_s: float) -> None:
        self._node = node
        self._produce = produce
        self._clock = clock
        self._interval_ms = int(interval_s * 1000)
        self._last: tuple[str, str] | None = None
        self._said_at: EpochMs = 0

    def say(self, state: str, detail: Mapping[str, Any] | None = None) -> None:
        """Announce ``state`` if it changed or the last announcement is an interval old."""
        now = self._clock.now_ms()
        said = (state, json.dumps(detail or {}, sort_keys=True))
        if said == self._last and now - self._said_at < self._interval_ms:
            return
        self._last, self._said_at = said, now
        announcement = Announcement(self._node, state, now, detail or {})
        self._produce(self._node.encode(), announcement.encode())

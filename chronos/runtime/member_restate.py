"""Restatements of a cluster member in compact mode (``rebuild.mode = "compact"``): the outbox
of every partition it delivers sent to the inner topic, as a node alone's or a replica group's
master's restater sends its one schedule's (``node/restater.py``).

Why: on a compacted inner topic an id's last record is all that stays of it; a reschedule, a
repeat's next occurrence or a cancel read before its add leave a last record that no longer
states what the schedule holds. Every hosted copy (standbys too) notes such ids in its
schedule's outbox; only the partition's deliverer sends them, each to the partition the id
came from, and the entry stays until the restatement is read back by ingest (the ledger
clears it then), so a member that loses the partition leaves the rest to its successor.

One worker for the member, whatever it delivers, as its refresh passes
(``member_refresh.py``): a thread per partition would make the member's cost follow its
partitions. Each lane gets its own ``Restater`` (its own "sent, not read back yet" set),
made when the lane is first seen and forgotten when it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from chronos.clock import Clock
from chronos.group.lane import Lane
from chronos.kafka.publisher import Publisher
from chronos.lifecycle import LoopWorker
from chronos.node.restater import Restater

#: Pause between two looks at the outboxes (a node alone's restater's).
_INTERVAL_S = 0.2


class MemberRestater(LoopWorker):
    """Sends the outbox of each partition the member delivers, every ``interval_s``.

    Parameters:
        lanes: the member's lanes now, by partition.
        publisher: the producer for restatements (started and stopped by the member).
        inner_topic: where they go.
        clock: time source (cancel tombstones' expiry).
        tombstone_retention_ms: how long a cancel tombstone is kept.
        interval_s: pause between two looks.
    """

    def __init__(
        self,
        *,
        lanes: Callable[[], Mapping[int, Lane]],
        publisher: Publisher,
        inner_topic: str,
        clock: Clock,
        tombstone_retention_ms: int,
        interval_s: float = _INTERVAL_S,
    ) -> None:
        super().__init__("member-restater")
        self._lanes = lanes
        self._publisher = publisher
        self._topic = inner_topic
        self._clock = clock
        self._retention_ms = tombstone_retention_ms
        self._interval_s = interval_s
        self._restaters: dict[int, tuple[Lane, Restater]] = {}
        #: Restatements sent (tests and logs).
        self.sent = 0

    def step(self) -> None:
        self.send_due()
        self._stop.wait(self._interval_s)

    def send_due(self) -> int:
        """Send what every delivered partition's outbox holds and was not sent yet; how many
        went out. A lane handed over sends nothing more: its successor restates."""
        lanes = {p: lane for p, lane in self._lanes().items() if not lane.released.is_set()}
        self._restaters = {
            p: known for p, known in self._restaters.items() if lanes.get(p) is known[0]
        }
        sent = 0
        for partition, lane in sorted(lanes.items()):
            if self.stopping:
                break
            known = self._restaters.get(partition)
            if known is None:
                known = self._restaters[partition] = (lane, self._restater(lane))
            sent += known[1].send_due()
        self.sent += sent
        return sent

    def _restater(self, lane: Lane) -> Restater:
        return Restater(
            store=lane.store,
            ledger=lane.ledger,
            publisher=self._publisher,
            inner_topic=self._topic,
            clock=self._clock,
            tombstone_retention_ms=self._retention_ms,
        )

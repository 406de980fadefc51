"""The standbys' worker (``group/standbys.py``) without Kafka: partitions join and leave in
the order asked. The reading itself is tested on Apache Kafka
(``tests/integration/test_standbys.py``)."""

from __future__ import annotations

import threading

from chronos.group.follower import Follower
from chronos.group.standbys import Read, StandbysWorker


class _BlockingLogs:
    """A reader whose read blocks until ``go`` is set; remembers what it follows."""

    def __init__(self) -> None:
        self.followed: set[int] = set()
        self.reading = threading.Event()
        self.go = threading.Event()

    def follow(self, partition: int, topic: str, offset: int = -2) -> None:
        self.followed.add(partition)

    def leave(self, partition: int) -> None:
        self.followed.discard(partition)

    def read(self, timeout_s: float) -> dict[int, Read]:
        self.reading.set()
        self.go.wait(10)
        return {}

    def close(self) -> None:
        pass


def test_a_partition_added_then_removed_before_a_read_is_not_followed() -> None:
    """A partition given as a standby and claimed at once: its leave must not be undone by
    its join. Mutant caught: every leave handled before any join (the partition followed
    again after ``remove`` said it was not: the old owner's cuts applied to a schedule its
    new owner delivers from)."""
    logs = _BlockingLogs()
    worker = StandbysWorker(logs)  # type: ignore[arg-type]
    worker.start()
    try:
        assert logs.reading.wait(10)
        follower = Follower(lambda *_args: None, dict)
        worker.add(3, "ns.progress.c.p3", follower)
        done = worker.remove(3)
        logs.go.set()
        assert done.wait(10)
        assert worker.follower(3) is None and 3 not in logs.followed
    finally:
        logs.go.set()
        worker.stop()
        worker.join(10)

"""A cluster's partition count is fixed when its inner topic is created: refused at start when
it changed, reported while running.

Why: the partition of an id is Kafka's partitioner over the partition count (the proxy, and
any producer of the wire format). Adding partitions to a live inner topic sends a later cancel
of an id to another partition than its add (the add is delivered anyway), and new ids to
partitions the running nodes do not place. Kafka cannot refuse the change (``kafka-topics
--alter`` is an operator's), so chronos says it at once and loudly: a node starting against a
count other than the one its cluster was created with refuses to start; a running node notices
within ``interval_s``, logs it and stops being ready, and keeps delivering the partitions it
knows (stopping them would delay every pending message of the cluster too).

What a cluster was created with: its per-partition progress topics (``TopicNames.shard_group``),
made for every partition when the cluster first started.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection

import structlog

from chronos.errors import ConfigError
from chronos.lifecycle import LoopWorker
from chronos.names import TopicNames

log = structlog.get_logger(__name__)

#: How often a running node says the count changed, while it is changed.
_REPEAT_S = 60.0


def created_with(topics: Collection[str], names: TopicNames, cluster: str) -> int | None:
    """The partition count cluster ``cluster`` was created with: N when the progress topics of
    partitions 0..N-1, and only those, exist; None for a new cluster (or one whose first start
    was cut short: its missing topics are made as for a new one)."""
    prefix = names.progress(names.shard_group(cluster, 0))[: -len("0")]
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    found = {int(m.group(1)) for topic in topics if (m := pattern.match(topic))}
    if not found or found != set(range(len(found))):
        return None
    return len(found)


def check_unchanged(count: int, topics: Collection[str], names: TopicNames, cluster: str) -> None:
    """Refuse to start a node of ``cluster`` when its inner topic's ``count`` is not what the
    cluster was created with."""
    earlier = created_with(topics, names, cluster)
    if earlier is None or earlier == count:
        return
    raise ConfigError(
        f"the inner topic {names.inner} has {count} partitions, but cluster {cluster} was "
        f"created with {earlier}: adding partitions sends ids to other partitions than before "
        "(a cancel would miss its add) and chronos cannot move them. Keep the count a cluster "
        "was created with; to grow, start a new cluster on a new namespace with more "
        "partitions (docs/clusters.md)"
    )


class PartitionWatch(LoopWorker):
    """Notices the inner topic's partition count changing under a running node.

    Parameters:
        started_with: the count the node placed partitions for.
        count: the inner topic's count now (raises when Kafka does not answer).
        interval_s: how often to ask.
    """

    def __init__(self, started_with: int, count: Callable[[], int], interval_s: float) -> None:
        super().__init__("partition-watch")
        self._started_with = started_with
        self._count = count
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._said_at = -_REPEAT_S
        #: The count seen when it differs from ``started_with``, else None.
        self.changed_to: int | None = None

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    def step(self) -> None:
        self._wake.wait(self._interval_s)
        if self.stopping:
            return
        try:
            count = self._count()
        except Exception as exc:  # Kafka away: asked again next interval
            log.debug("partition_count_unknown", error=str(exc))
            return
        self.changed_to = None if count == self._started_with else count
        now = time.monotonic()
        if self.changed_to is not None and now - self._said_at >= _REPEAT_S:
            self._said_at = now
            log.error(
                "inner_partitions_changed",
                placed=self._started_with,
                now=count,
                effect="ids now go to other partitions than their earlier records (cancels "
                "may miss their adds) and partitions beyond the placed ones have no owner: "
                "restore the count (a new cluster on a new namespace to grow)",
            )

    def problem(self) -> str | None:
        """What readiness reports while the count differs, else None."""
        if self.changed_to is None:
            return None
        return (
            f"the inner topic has {self.changed_to} partitions, this node placed "
            f"{self._started_with}: see the inner_partitions_changed log line"
        )

"""Refresh passes of a cluster member (``cluster.shape = "node"``): every partition it delivers
re-appended to the inner topic once per ``rebuild.refresh_interval_s``, and the floor each
pass proves published in that partition's cuts (its lane's ``MasterState.floor``), as a node
alone's or a replica group's master's passes do (``node/refresh.py``).

Why: without them a message scheduled further ahead than the inner topic's retention lives
only in the members' stores, and a copy made after retention removed records (a new member,
a replaced disk) may lack messages whose only records were removed: it never stands for its
partition (``member_host.py``) until a floor reaches where it began.

Per partition, because a floor is per partition and a partition moves alone: a pass is due
an interval after its lane's floor (at once for a lane without one: a new cluster, or a
holder of the last release). One worker and one producer for the member, whatever it
delivers: the passes due run one after another, at most ``rebuild.refresh_rate`` records a
second each, through a producer made for them and closed after them (no producer is kept
between passes hours apart).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from chronos.clock import Clock
from chronos.group.lane import Lane
from chronos.kafka.acks import Acks
from chronos.kafka.publisher import OwnedPublisher
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.node.refresh import RefreshPass, settle
from chronos.schedule.floor import Floor
from chronos.settings import RebuildSettings

log = structlog.get_logger(__name__)

#: After a failed pass of a partition, try it again this much later.
_RETRY_MS = 60_000
#: Longest wait for a pass's records to leave the producer.
_FLUSH_TIMEOUT_S = 60.0
#: How long an idle worker waits before it looks again (a new lane's first pass waits this).
_IDLE_S = 1.0


class MemberRefresh(LoopWorker):
    """Runs the refresh passes of the partitions a member delivers.

    Parameters:
        lanes: the member's lanes now, by partition.
        open_publisher: a new producer for the passes due (partitioned by id, as the proxy
            does; compressed: a pass is bulk, off the delivery path).
        inner_topic: where refresh records go.
        settings: interval and rate.
        clock: time source.
        metrics: counters.
    """

    def __init__(
        self,
        *,
        lanes: Callable[[], Mapping[int, Lane]],
        open_publisher: Callable[[], OwnedPublisher],
        inner_topic: str,
        settings: RebuildSettings,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        super().__init__("member-refresh")
        self._lanes = lanes
        self._open_publisher = open_publisher
        self._topic = inner_topic
        self._interval_ms = int(settings.refresh_interval_s * 1000)
        self._rate = settings.refresh_rate
        self._clock = clock
        self._metrics = metrics
        #: Partitions whose last pass failed: not before this time (epoch ms).
        self._retry_at: dict[int, int] = {}
        #: Passes completed (tests and logs).
        self.passes = 0

    def due(self) -> list[tuple[int, Lane]]:
        """The lanes whose pass is due now, the longest due first."""
        now = self._clock.now_ms()
        found: list[tuple[int, int, Lane]] = []
        for partition, lane in self._lanes().items():
            if lane.released.is_set():
                continue  # handed over: its successor refreshes it
            current = lane.state.floor.current
            due_at = 0 if current is None else current.at_ms + self._interval_ms
            due_at = max(due_at, self._retry_at.get(partition, 0))
            if now >= due_at:
                found.append((due_at, partition, lane))
        return [(partition, lane) for _, partition, lane in sorted(found, key=lambda f: f[:2])]

    def step(self) -> None:
        due = self.due()
        if not due:
            self._stop.wait(_IDLE_S)
            return
        publisher = self._open_publisher()
        publisher.start()
        try:
            for partition, lane in due:
                if self.stopping:
                    return
                self._run_pass(publisher, partition, lane)
        finally:
            publisher.stop()
            publisher.join(_FLUSH_TIMEOUT_S)

    def _lane_gone(self, partition: int, lane: Lane) -> bool:
        """Whether ``lane`` no longer delivers ``partition`` here (handed over, or lost to a
        fenced loop)."""
        return lane.released.is_set() or self._lanes().get(partition) is not lane

    def _run_pass(self, publisher: OwnedPublisher, partition: int, lane: Lane) -> None:
        """One partition's pass; its floor advanced once Kafka acknowledged every record."""
        started_ms = self._clock.now_ms()
        began = time.monotonic()
        offsets = lane.ledger.inner_offsets([partition])
        acks = Acks()
        try:
            counted = RefreshPass(
                lane.store,
                self._topic,
                self._rate,
                self._stop,
                cancelled=lambda: self._lane_gone(partition, lane),
            ).run(publisher, acks, started_ms)
            if counted is None:
                # Stopping, or the lane was handed over or lost: the store was not read
                # whole (and may be dropped soon after a handover).
                log.info("member_refresh_ended", partition=partition)
                return
            publisher.flush(_FLUSH_TIMEOUT_S)
            settle(acks)
        except Exception as exc:  # any failure: this partition's pass is tried again later
            log.error(
                "member_refresh_failed",
                partition=partition,
                error=str(exc),
                retry_in_s=_RETRY_MS / 1000,
            )
            self._retry_at[partition] = started_ms + _RETRY_MS
            return
        self._retry_at.pop(partition, None)
        lane.state.floor.advance(Floor(offsets, started_ms))
        messages, tombstones = counted
        self._metrics.incr("refreshed_records", messages + tombstones)
        self.passes += 1
        log.info(
            "member_refresh_done",
            partition=partition,
            messages=messages,
            tombstones=tombstones,
            seconds=round(time.monotonic() - began, 3),
            floor=offsets,
        )

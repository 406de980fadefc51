"""The partitions a cluster member hosts, and its one ingest over all of them.

A member of the node shape (``docs/design/cluster-v2.md``) keeps one schedule per hosted
partition in its one database (``group/hosted.py``) and reads every hosted partition through
one ingest (``node/ingest.py`` over ``schedule/partition_ledgers.py``), with one cancel gate
(``node/watermark.py``) over them. On a change of the member list it computes the placement,
opens the schedules of the partitions it now hosts, follows them (``group/standbys.py``) and
starts its ingest again over the new set: a new *generation* (ingest, its watermark and its
probe), which first catches up with the new partitions from their start (their restore) and
then goes on where each schedule says.

A partition is *standing* (it may be claimed, and the readiness board says so) once the
ingest generation that reads it caught up with the inner topic and its progress log was read
to its end once.

Not yet: a partition no longer hosted is kept (followed and ingested) until the node stops;
the cancel gate is the earliest over every hosted partition (a lagging partition holds every
lane back, never forward).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from chronos.clock import Clock
from chronos.cluster.placement import Placement
from chronos.delivery.deadletter import DeadLetters
from chronos.group.hosted import Hosted
from chronos.group.standbys import StandbysWorker
from chronos.kafka.admin import StableEnds
from chronos.kafka.clients import KafkaClients
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.node.decoder_process import DecoderProcess
from chronos.node.ingest import IngestWorker
from chronos.node.inner_reader import BatchSource, DecodedBatch, InnerReader, ReaderSpec
from chronos.node.watermark import IngestWatermark, WatermarkProbe
from chronos.schedule.partition_ledgers import PartitionLedgers
from chronos.settings import ChronosSettings
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

_TICK_S = 0.1


@dataclass
class _Generation:
    """One ingest over one hosted set: its worker, cancel gate and the gate's probe."""

    partitions: list[int]
    watermark: IngestWatermark
    ingest: IngestWorker
    probe: WatermarkProbe

    def start(self) -> None:
        self.ingest.start()
        self.probe.start()

    def stop(self, timeout_s: float) -> None:
        self.probe.stop()
        self.ingest.stop()
        self.ingest.join(timeout_s)
        self.probe.join(timeout_s)


class MemberHost(LoopWorker):
    """Keeps this member's hosted partitions and its ingest in step with the placement.

    Parameters:
        settings: the member's settings.
        partitions: the inner topic's partition count.
        open_hosted: opens a partition's schedule (following).
        standbys: follows hosted partitions not delivered here.
        delivering: the partitions this member delivers now (never followed).
        clients: the member's Kafka clients.
        dead_letters: where ingest sends what it cannot decode.
        clock: time source.
        metrics: counters.
        on_fatal: told when ingest cannot go on.
    """

    def __init__(
        self,
        *,
        settings: ChronosSettings,
        partitions: int,
        open_hosted: Callable[[int], Hosted],
        standbys: StandbysWorker,
        delivering: Callable[[], frozenset[int]],
        clients: KafkaClients,
        dead_letters: DeadLetters,
        clock: Clock,
        metrics: Metrics,
        on_fatal: Callable[[str], None],
    ) -> None:
        super().__init__("member-host")
        self._settings = settings
        self._node = settings.node.node_id
        self._partitions = partitions
        self._open_hosted = open_hosted
        self._standbys = standbys
        self._delivering = delivering
        self._clients = clients
        self._dead_letters = dead_letters
        self._clock = clock
        self._metrics = metrics
        self._on_fatal = on_fatal
        self._changed = threading.Event()
        self._lock = threading.Lock()
        self._members: frozenset[str] | None = None
        self._placed_for: frozenset[str] | None = None
        #: The hosted partitions' schedules (only ever added to while running).
        self.hosted: dict[int, Hosted] = {}
        self._generation: _Generation | None = None
        self._generations = 0

    def members_changed(self, members: frozenset[str]) -> None:
        """The membership's callback: recompute at the next tick."""
        with self._lock:
            self._members = members
        self._changed.set()

    def stop(self) -> None:
        super().stop()
        self._changed.set()

    def step(self) -> None:
        self._changed.wait(_TICK_S)
        self._changed.clear()
        if self.stopping:
            return
        with self._lock:
            members = self._members
        if members is None or members == self._placed_for:
            return
        placement = Placement.of(members, self._partitions, self._settings.cluster.standby_replicas)
        wanted = placement.hosted_by(self._node) | self._delivering()
        added = sorted(wanted - set(self.hosted))
        log.info(
            "member_placement",
            node=self._node,
            owns=sorted(placement.owned_by(self._node)),
            hosts=sorted(wanted),
            added=added,
            members=sorted(members),
        )
        for partition in added:
            hosted = self._open_hosted(partition)
            self.hosted[partition] = hosted
            self._standbys.add(partition, hosted.progress_topic, hosted.follower())
        generation = self._generation
        if self.hosted and (generation is None or generation.partitions != sorted(self.hosted)):
            self._restart_ingest()
        # Only once done: a step that failed is done again at the next tick.
        self._placed_for = members

    def _restart_ingest(self) -> None:
        """A new generation over every hosted partition; the old one stops first (one
        consumer per node: two would write the same schedules)."""
        old = self._generation
        if old is not None:
            old.stop(self._settings.node.shutdown_timeout_s)
        partitions = sorted(self.hosted)
        self._generations += 1
        generation = self._new_generation(partitions, self._generations)
        self._generation = generation
        generation.start()
        log.info("member_ingest_started", partitions=partitions, generation=self._generations)

    def _new_generation(self, partitions: list[int], number: int) -> _Generation:
        s = self._settings
        names = s.topics.names
        ledgers = PartitionLedgers({p: self.hosted[p].ledger for p in partitions})
        watermark = IngestWatermark(
            ledgers.inner_offsets(partitions), s.node.cancel_margin_ms, partitions, self._clock
        )
        config = self._clients.consumer_config(
            names.node_group(s.node.node_id), **{"auto.offset.reset": "error"}
        )
        spec = ReaderSpec(
            config,
            names.inner,
            partitions,
            s.limits,
            names,
            s.node.ingest_batch_max,
            s.node.ingest_poll_timeout_ms / 1000.0,
            trust_gaps=s.rebuild.mode == "compact",
        )

        def open_source() -> BatchSource:
            if s.node.ingest_decoder == "process":

                def read(batch: DecodedBatch) -> None:
                    watermark.read(batch.offsets, batch.appended, batch.hazard)

                return DecoderProcess(f"chronos-decoder-{number}", spec, s.log, on_read=read)
            return InnerReader(spec, self._clock.now_ms)

        ingest = IngestWorker(
            index=number,
            partitions=partitions,
            open_source=open_source,
            ledger=ledgers,
            dead_letters=self._dead_letters,
            clock=self._clock,
            poll_timeout_ms=s.node.ingest_poll_timeout_ms,
            metrics=self._metrics,
            on_fatal=self._on_fatal,
            watermark=watermark,
        )
        interval_ms = s.node.watermark_interval_ms
        ends = StableEnds(
            self._clients.admin,
            names.inner,
            partitions,
            min(30.0, max(1.0, 20 * interval_ms / 1000.0)),
        )
        probe = WatermarkProbe(watermark, ends, self._clock, interval_ms)
        return _Generation(partitions, watermark, ingest, probe)

    def horizon(self, now_ms: EpochMs) -> EpochMs:
        """The last slot a lane may deliver now: the cancel gate of the running ingest (0
        before one: nothing)."""
        generation = self._generation
        return 0 if generation is None else generation.watermark.horizon(now_ms)

    def standing(self) -> frozenset[int]:
        """The hosted partitions whose store is complete: read by an ingest that caught up,
        and their log read to its end once."""
        generation = self._generation
        if generation is None or not generation.ingest.caught_up.is_set():
            return frozenset()
        read = self._standbys.holdings()
        return frozenset(p for p in generation.partitions if p in read)

    def finish(self) -> None:
        generation, self._generation = self._generation, None
        if generation is not None:
            generation.stop(self._settings.node.shutdown_timeout_s)

"""The partitions a cluster member hosts, and its one ingest over all of them.

A member of the node shape (``docs/design/cluster-v2.md``) keeps one schedule per hosted
partition in its one database (``group/hosted.py``) and reads the hosted partitions through
one ingest (``node/ingest.py`` over ``schedule/partition_ledgers.py``), with one cancel gate
(``node/watermark.py``) over them, whose proof each lane reads for its own partition only
(``PartitionGate``). On a change of the member list it computes the placement,
opens the schedules of the partitions it now hosts and follows them (``group/standbys.py``).

A cold member's first ingest reads the partitions it owns (by the placement of now: one that
changes what it owns before that read caught up starts it again). The others are restored
afterwards (read from where their schedule stopped) in an ingest of their own, beside the
member's, the partitions it owns before its standby copies: restarting the member's ingest
over them at once would hold every lane of the member back for the whole restore (a new
cancel gate proves nothing before every partition it reads was caught up), and the member
would claim nothing meanwhile, a failover included. Once a restore caught up, the member's
ingest starts again over what it read and what was restored (a new *generation*: ingest,
cancel gate and probe). The new gate carries what the old one
proved (it is in the store), so the lanes of the partitions read before go on; their
deliveries past that proof and the margin wait for the new ingest's first reads or probe.
Each partition is written by one ingest at a time.

A partition is *standing* (it may be claimed, and the readiness board says so) once the
member's ingest generation that reads it caught up with the inner topic and its progress log
was read to its end once.

A partition no longer hosted is dropped (unfollowed, left out of a new ingest generation, its
column families removed) once that lasted the grace, every node it is placed on stands for
it and its log names another holder: until then this member's copy is the warm one, if an
ingest reads it (one not read yet when the placement took it away is never restored: it
would stand for nothing the new hosts do not).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from chronos.clock import Clock
from chronos.cluster.placement import Placement
from chronos.delivery.deadletter import DeadLetters
from chronos.group.hosted import Hosted
from chronos.group.standbys import StandbysWorker
from chronos.kafka.admin import StableEnds
from chronos.kafka.clients import LONG_POLL_MS, KafkaClients, lingering_fetch
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.node.decoder_process import DecoderProcess
from chronos.node.ingest import IngestWorker
from chronos.node.inner_reader import BatchSource, DecodedBatch, InnerReader, ReaderSpec
from chronos.node.watermark import IngestWatermark, WatermarkProbe
from chronos.schedule.origin import StoreOrigin
from chronos.schedule.partition_ledgers import PartitionLedgers
from chronos.settings import ChronosSettings, KafkaValue
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

_TICK_S = 0.1


@dataclass
class _Generation:
    """One ingest over a set of hosted partitions: its worker, and for the member's ingest
    its cancel gate and the gate's probe (a restore has none: nothing is delivered from
    partitions it reads)."""

    partitions: list[int]
    watermark: IngestWatermark | None
    ingest: IngestWorker
    probe: WatermarkProbe | None

    def start(self) -> None:
        self.ingest.start()
        if self.probe is not None:
            self.probe.start()

    def stop(self, timeout_s: float) -> None:
        if self.probe is not None:
            self.probe.stop()
        self.ingest.stop()
        self.ingest.join(timeout_s)
        if self.probe is not None:
            self.probe.join(timeout_s)


class PartitionGate:
    """One hosted partition's cancel gate (``schedule/cancel_gate.py``), through the member's
    running ingest: its lane is held by that partition's proof only."""

    def __init__(self, host: MemberHost, partition: int) -> None:
        self._host = host
        self._partition = partition

    def horizon(self, now_ms: EpochMs) -> EpochMs:
        return self._host.horizon_of(self._partition, now_ms)

    def want(self, slot: EpochMs) -> None:
        self._host.want(slot)


def ingest_spec(
    settings: ChronosSettings, clients: KafkaClients, partitions: list[int], restoring: bool
) -> ReaderSpec:
    """What a member's ingest over ``partitions`` reads, and how (``restoring``: a restore's).

    A long poll (``KafkaClients.waiting_consumer``): its fetch names every hosted partition,
    and a short hold made it an empty fetch every 50 ms at rest. The member's ingest fetches
    once per ``cluster.ingest_linger_ms`` while records wait (``kafka.clients.lingering_fetch``);
    a restore reads a backlog, and fetches again as soon as its queue is drained."""
    s = settings
    overrides: dict[str, KafkaValue] = {
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": LONG_POLL_MS,
    }
    if not restoring:
        overrides |= lingering_fetch(s.cluster.ingest_linger_ms)
    config = clients.consumer_config(s.topics.names.node_group(s.node.node_id), **overrides)
    return ReaderSpec.of_ingest(s, config, partitions, s.cluster.ingest_linger_ms / 1000.0)


def restore_next(unread: set[int], owned: frozenset[int], placed: frozenset[int]) -> list[int]:
    """What a member restores next of the hosted partitions no ingest reads (``unread``):
    those it owns first, then its standby copies (``placed`` here); none the placement no
    longer puts here (``MemberHost._drop_unhosted`` drops it). A restore of all at once made
    an owned partition wait for every copy's backlog."""
    return sorted(unread & owned or unread & placed)


def restore_goes_on(running: list[int], wanted: list[int], owned: frozenset[int]) -> bool:
    """Whether a running restore of ``running`` goes on when ``wanted`` is what to restore
    next: it reads all of them, and nothing more when they are owned partitions (a copy the
    placement gave the member to own waits for no other copy's backlog)."""
    if set(wanted) & owned:
        return set(wanted) == set(running)
    return set(wanted) <= set(running)


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
        busy: the partitions the member's rounds may still act on (its lanes, handed over
            or not, and its claims not led yet): never dropped.
        rounds_run: how many rounds the member ran (a drop waits for two after it stopped
            standing for the partition: a round that read it standing has ended).
        stands: whether a node says on the readiness board that it stands for a partition.
        drop_store: removes a closed partition's schedule from the member's database.
        grace_s: how long a partition stays unhosted before it is dropped.
        log_starts: where the inner topic starts now, for these partitions (retention and
            DeleteRecords move it up).
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
        busy: Callable[[], frozenset[int]] = frozenset,
        rounds_run: Callable[[], int] = lambda: 0,
        stands: Callable[[str, int], bool] = lambda _node, _partition: False,
        drop_store: Callable[[int], None] = lambda _partition: None,
        grace_s: float = 10.0,
        log_starts: Callable[[list[int]], Mapping[int, int]] = lambda _partitions: {},
    ) -> None:
        super().__init__("member-host")
        self._busy = busy
        self._rounds_run = rounds_run
        self._stands = stands
        self._drop_store = drop_store
        self._grace_s = grace_s
        self._log_starts = log_starts
        #: Hosted partitions whose schedule began past the topic's first record and may lack
        #: what retention removed (``_open_with_origin``): never standing.
        self._incomplete: frozenset[int] = frozenset()
        #: Where each incomplete schedule began reading the inner topic.
        self._began: dict[int, int] = {}
        #: The placement of the last member list applied, and what it puts on this member.
        self._placement: Placement | None = None
        self._placed_here: frozenset[int] = frozenset()
        #: Partitions no longer hosted: since when (monotonic).
        self._unhosted_since: dict[int, float] = {}
        #: Partitions being dropped: the rounds run when this member stopped standing for it;
        #: and their set as other threads read it (replaced whole, never changed in place).
        self._dropping: dict[int, int] = {}
        self._not_standing: frozenset[int] = frozenset()
        #: Held while a hosted partition's schedule is written outside ingest and the
        #: standbys (the delete thread's pass), and while one is dropped.
        self.store_lock = threading.Lock()
        #: Partitions dropped (tests and logs).
        self.dropped = 0
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
        #: The hosted partitions' schedules.
        self.hosted: dict[int, Hosted] = {}
        self._generation: _Generation | None = None
        #: The ingest restoring partitions newly hosted (None: none restores), and how many
        #: restores started.
        self._restore: _Generation | None = None
        self.restores = 0
        self._generations = 0
        #: What the member's first ingest read (the rest was restored after it caught up),
        #: and that ingest's generation.
        self.first_read: list[int] = []
        self._first_generation: _Generation | None = None
        #: What the member owned when that read started (a change starts it again).
        self._first_owned: frozenset[int] = frozenset()

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
        restore = self._restore
        if restore is not None and restore.ingest.caught_up.is_set():
            # Restored: the member's ingest takes them over (one ingest per partition).
            restore.stop(self._settings.node.shutdown_timeout_s)
            self._restore = None
            log.info("member_restore_done", partitions=restore.partitions)
            self._restart_ingest(self._read_after(restore.partitions))
        with self._lock:
            members = self._members
        if members is not None and members != self._placed_for:
            self._place(members)
        elif self._unread():
            self._ingest_hosted()  # a first ingest caught up: its standby copies now
        if self._incomplete:
            self._completed()
        self._drop_unhosted()

    def _place(self, members: frozenset[str]) -> None:
        """Host what the placement over ``members`` gives this member."""
        placement = Placement.of(members, self._partitions, self._settings.cluster.standby_replicas)
        placed_here = frozenset(placement.hosted_by(self._node))
        wanted = placed_here | self._delivering()
        added = sorted(wanted - set(self.hosted))
        log.info(
            "member_placement",
            node=self._node,
            owns=sorted(placement.owned_by(self._node)),
            hosts=sorted(wanted),
            added=added,
            members=sorted(members),
        )
        starts = self._log_starts(added) if added else {}
        for partition in added:
            hosted = self._open_with_origin(partition, starts.get(partition, 0))
            self.hosted[partition] = hosted
            self._standbys.add(partition, hosted.progress_topic, hosted.follower())
        self._ingest_hosted(placement)
        # Only once done: a step that failed is done again at the next tick.
        self._placed_for = members
        self._placement = placement
        self._placed_here = placed_here

    def _open_with_origin(self, partition: int, start: int) -> Hosted:
        """Open ``partition``'s schedule, knowing where its ingest began. A schedule whose next
        inner offset lies below where the topic now starts missed records retention removed
        (a cancel among them, maybe): it is removed and restored from the topic's start. One
        that began past offset 0 may lack messages whose only records were removed: it is
        *incomplete*, and does not stand for the partition (its peers deliver it) until the
        holder's refresh passes publish a floor at or past where it began
        (``_completed``), unless ``rebuild.accept_incomplete``; on a compacted inner topic
        (no floor is published there) it is complete: the cleaner keeps every id's last
        record (``StoreOrigin.missing``, the node alone's rule). A schedule written before
        began counts as read from offset 0, as the node alone's does
        (``runtime/origin.py``)."""
        hosted = self._open_hosted(partition)
        store = hosted.store
        stored = store.read_inner_offsets([partition]).get(partition)
        if stored is not None and stored < start:
            log.error(
                "store_missed_inner_records",
                partition=partition,
                gap=f"{stored}..{start}",
                action="removed; restored from where the inner topic starts now",
            )
            store.close()
            self._drop_store(partition)
            hosted, stored = self._open_hosted(partition), None
            store = hosted.store
        began = store.read_began_offsets([partition]).get(partition)
        if began is None:
            began = 0 if stored is not None else start
            store.write_began_offsets({partition: began})
        compacted = self._settings.rebuild.mode == "compact"
        if StoreOrigin({partition: began}, compacted=compacted).missing(None):
            accepted = self._settings.rebuild.accept_incomplete
            log.error(
                "member_store_incomplete",
                partition=partition,
                began=began,
                action="stands for it anyway (rebuild.accept_incomplete)"
                if accepted
                else "stands for it once its holder's refresh pass publishes a floor at or past "
                "where it began (within rebuild.refresh_interval_s): its messages whose only "
                "records the inner topic's retention removed are not here until then",
            )
            if not accepted:
                self._incomplete = self._incomplete | {partition}
                self._began[partition] = began
        return hosted

    def _completed(self) -> None:
        """An incomplete copy becomes complete once a floor its holder published (a cut its
        follower read) lies at or past where it began: every message and tombstone the
        partition holds has a record there or later, and this copy read them all."""
        for partition in sorted(self._incomplete):
            hosted = self.hosted.get(partition)
            floor = None if hosted is None else hosted.latest_floor()
            began = self._began.get(partition, 0)
            if floor is None or floor.offsets.get(partition, -1) < began:
                continue
            self._incomplete = self._incomplete - {partition}
            self._began.pop(partition, None)
            log.info(
                "member_store_complete",
                partition=partition,
                began=began,
                floor=floor.offsets.get(partition),
            )

    def _drop_unhosted(self) -> None:
        """Drop a partition the placement no longer puts here, once that lasted ``grace_s``
        and the nodes it is placed on hold it: until then this member's copy is the warm one
        that can take over (the partition shape
        measured a partition undelivered for 25 s when it dropped sooner): the holder is
        one of the nodes it is placed on, and the others stand. It first stops
        standing for it, and drops it after two more rounds of its own, none of which may
        have taken it up (a round that read it standing before has ended by then)."""
        placement = self._placement
        if placement is None or self._restore is not None:
            return  # while a restore runs, the member's ingest is not started again
        wanted = self._placed_here | self._delivering()
        for partition in [p for p in self._unhosted_since if p in wanted]:
            del self._unhosted_since[partition]
            if self._dropping.pop(partition, None) is not None:
                self._not_standing = frozenset(self._dropping)
                log.info("member_drop_withdrawn", node=self._node, partition=partition)
        unwanted = sorted(set(self.hosted) - wanted)
        if not unwanted:
            return  # the usual case, every tick: nothing read, nothing copied
        now = time.monotonic()
        holdings = self._standbys.holdings()
        ready: list[int] = []
        for partition in unwanted:
            since = self._unhosted_since.setdefault(partition, now)
            holding = holdings.get(partition)
            hosts = placement.hosts.get(partition, ())
            if (
                now - since < self._grace_s
                or holding is None
                or holding.node not in hosts
                # The holder delivers it (a delivered partition is no standby's: it does not
                # say it stands); the others must.
                or not all(self._stands(n, partition) for n in hosts if n != holding.node)
            ):
                if self._dropping.pop(partition, None) is not None:
                    # Its new hosts stopped standing: this copy is the warm one again.
                    self._not_standing = frozenset(self._dropping)
                    log.info(
                        "member_drop_withdrawn",
                        node=self._node,
                        partition=partition,
                        reason="hosts",
                    )
                continue
            marked = self._dropping.get(partition)
            if marked is None:
                self._dropping[partition] = self._rounds_run()
                self._not_standing = frozenset(self._dropping)
                log.info(
                    "member_drop_started", node=self._node, partition=partition, holder=holding.node
                )
            elif self._rounds_run() >= marked + 2:
                if partition in self._busy():
                    del self._dropping[partition]  # a round took it up after all
                    self._not_standing = frozenset(self._dropping)
                    log.info(
                        "member_drop_withdrawn", node=self._node, partition=partition, reason="busy"
                    )
                else:
                    ready.append(partition)
        if ready:
            self._drop(ready)

    def _drop(self, partitions: list[int]) -> None:
        """Unfollow ``partitions``, start the member's ingest again without them (once for
        all: each start costs the lanes a moment), and remove their schedules."""
        timeout_s = self._settings.node.shutdown_timeout_s
        left = [(p, self._standbys.remove(p)) for p in partitions]
        if not all(done.wait(timeout_s) for _p, done in left):
            log.warning(
                "member_drop_waits", node=self._node, partitions=partitions, reason="standbys"
            )
            return
        gone = {p: self.hosted.pop(p) for p in partitions}
        self._incomplete = self._incomplete - set(partitions)
        for partition in partitions:
            self._unhosted_since.pop(partition, None)
            self._began.pop(partition, None)
        generation = self._generation
        if generation is not None and not set(partitions).isdisjoint(generation.partitions):
            first = (
                generation is self._first_generation and not generation.ingest.caught_up.is_set()
            )
            self._restart_ingest(self._read_after([]))
            if first:
                self._first_generation = self._generation  # still the first read
        for partition in partitions:
            self._dropping.pop(partition, None)
        self._not_standing = frozenset(self._dropping)
        with self.store_lock:
            for partition, hosted in gone.items():
                hosted.store.close()
                self._drop_store(partition)
        self.dropped += len(partitions)
        log.info("member_partitions_dropped", node=self._node, partitions=partitions)

    def _ingest_hosted(self, placement: Placement | None = None) -> None:
        """The hosted partitions read: the member's ingest at the first start, then restores
        for those it does not read yet, the partitions it owns before its standby copies
        (none the placement no longer puts here).

        The first start reads the partitions this member delivers or is placed to own, and
        the others (its standby copies) only once it caught up: a cold member restores what
        it is to deliver first. ``scripts/scale_out_check.py --shape node`` measured a node
        added to a 1-node cluster restoring all 16 partitions (1 M records, 50 s on two
        cores) before it stood for its 8 own. A placement that changes what it owns while
        that first read runs starts it again over what it owns now: a partition placed on
        it then waited for the standby copies' restore (57 s for 250,000 pending, against
        18 s for its peer's)."""
        if not self.hosted:
            return
        placement = placement or self._placement
        generation = self._generation
        if generation is None:
            self._read_first(placement)
            return
        if not generation.ingest.caught_up.is_set():
            if generation is self._first_generation:
                owned_now = self._owned(placement) & set(self.hosted)
                if owned_now != self._first_owned:
                    log.info(
                        "member_first_read_moved",
                        before=generation.partitions,
                        now=self._first_read(placement),
                    )
                    self._read_first(placement)
            return  # the rest once it caught up (``step``)
        restore = self._restore
        unread = set(self.hosted) - set(generation.partitions)
        owned = self._owned(placement)
        placed = owned | (placement.hosted_by(self._node) if placement else set(self.hosted))
        partitions = restore_next(unread, owned, placed)
        if restore is not None:
            if restore_goes_on(restore.partitions, partitions, owned):
                return
            restore.stop(self._settings.node.shutdown_timeout_s)
        elif not partitions:
            return
        self._generations += 1
        self._restore = self._new_generation(partitions, self._generations, gated=False)
        self._restore.start()
        self.restores += 1
        log.info("member_restore_started", partitions=partitions)

    def _read_first(self, placement: Placement | None) -> None:
        """The member's first ingest (started again when what it owns moved before it caught
        up: what it read so far is in the store, and is not read again)."""
        self.first_read = self._first_read(placement)
        self._first_owned = self._owned(placement) & set(self.hosted)
        self._restart_ingest(self.first_read)
        self._first_generation = self._generation

    def _read_after(self, restored: list[int]) -> list[int]:
        """What the member's ingest reads once a restore of ``restored`` caught up: what it
        read before and those, still hosted (standby copies left to a later restore stay
        out: a gated ingest that reads a backlog holds every lane)."""
        generation = self._generation
        before = set(generation.partitions) if generation is not None else set()
        return sorted((before | set(restored)) & set(self.hosted)) or sorted(self.hosted)

    def _unread(self) -> bool:
        """Whether some hosted partition is read by no ingest: deferred by the first read or
        a restore of owned partitions, or taken away by the placement before it was read
        (never restored: true until it is dropped, and ``_ingest_hosted`` then finds nothing
        to do)."""
        generation = self._generation
        if generation is None or self._restore is not None:
            return False
        return bool(set(self.hosted) - set(generation.partitions))

    def _owned(self, placement: Placement | None) -> frozenset[int]:
        """The partitions this member delivers or is placed to own."""
        own = set(self._delivering())
        if placement is not None:
            own |= set(placement.owned_by(self._node))
        return frozenset(own)

    def _first_read(self, placement: Placement | None) -> list[int]:
        """What the member's first ingest reads: the hosted partitions it delivers or is
        placed to own (every hosted one when that leaves none)."""
        first = sorted(self._owned(placement) & set(self.hosted))
        return first or sorted(self.hosted)

    def _restart_ingest(self, partitions: list[int]) -> None:
        """A new generation over ``partitions``; the old one stops first (one consumer per
        node: two would write the same schedules)."""
        old = self._generation
        carried: dict[int, EpochMs] = {}
        if old is not None:
            old.stop(self._settings.node.shutdown_timeout_s)
            if old.watermark is not None:
                # What the old gate proved is in the store: its partitions' lanes go on
                # without waiting for the new ingest to catch up (only the restored wait).
                carried = old.watermark.proofs()
        self._generations += 1
        generation = self._new_generation(partitions, self._generations, carried=carried)
        self._generation = generation
        generation.start()
        log.info("member_ingest_started", partitions=partitions, generation=self._generations)

    def _new_generation(
        self,
        partitions: list[int],
        number: int,
        gated: bool = True,
        carried: Mapping[int, EpochMs] | None = None,
    ) -> _Generation:
        """An ingest over ``partitions``; ``gated``: with the cancel gate lanes deliver by
        (the member's ingest), else a restore's; ``carried``: what the previous gate
        proved."""
        s = self._settings
        names = s.topics.names
        ledgers = PartitionLedgers({p: self.hosted[p].ledger for p in partitions})
        watermark = (
            IngestWatermark(
                ledgers.inner_offsets(partitions),
                s.node.cancel_margin_ms,
                partitions,
                self._clock,
                carried,
            )
            if gated
            else None
        )
        spec = ingest_spec(s, self._clients, partitions, restoring=not gated)

        def open_source() -> BatchSource:
            if s.node.ingest_decoder == "process":

                def read(batch: DecodedBatch) -> None:
                    if watermark is not None:
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
        if watermark is None:
            return _Generation(partitions, None, ingest, None)
        interval_ms = s.node.watermark_interval_ms
        ends = StableEnds(
            self._clients.admin,
            names.inner,
            partitions,
            min(30.0, max(1.0, 20 * interval_ms / 1000.0)),
        )
        probe = WatermarkProbe(watermark, ends, self._clock, interval_ms)
        return _Generation(partitions, watermark, ingest, probe)

    def gate(self, partition: int) -> PartitionGate:
        """The cancel gate of ``partition``'s lane: the running ingest's, whichever runs."""
        return PartitionGate(self, partition)

    def horizon_of(self, partition: int, now_ms: EpochMs) -> EpochMs:
        """The last slot ``partition``'s lane may deliver now: what the running ingest's
        cancel gate proved of it (0 before one: nothing)."""
        generation = self._generation
        if generation is None or generation.watermark is None:
            return 0
        return generation.watermark.horizon_of(partition, now_ms)

    def want(self, slot: EpochMs) -> None:
        """A lane waits for ``slot``: the running ingest's gate probes in time for it (a
        generation started later probes once at its start, and then on its lanes' wants)."""
        generation = self._generation
        if generation is not None and generation.watermark is not None:
            generation.watermark.want(slot)

    def placement(self) -> Placement | None:
        """The placement of the last member list applied (None before the first)."""
        return self._placement

    def caught_up(self) -> bool:
        """Whether the member's ingest applied the inner topic up to its end once."""
        generation = self._generation
        return generation is not None and generation.ingest.caught_up.is_set()

    def proven_ms(self) -> EpochMs | None:
        """How far the member's cancel gate proved every partition it reads (what Kafka last
        answered), None before a proof or without an ingest."""
        generation = self._generation
        watermark = None if generation is None else generation.watermark
        return None if watermark is None else watermark.value

    def standing(self, delivered: frozenset[int] = frozenset()) -> frozenset[int]:
        """The hosted partitions whose store is complete: read by an ingest that caught up,
        and their log read to its end once; or among ``delivered``, the partitions this
        member delivered until its loop was fenced (``OwnershipRound.retaking``), whose
        store its own commits kept, while the standbys' reader reads their logs again."""
        generation = self._generation
        if generation is None or not generation.ingest.caught_up.is_set():
            return frozenset()
        read = self._standbys.holdings()
        left_out = self._not_standing | self._incomplete
        return frozenset(
            p for p in generation.partitions if (p in read or p in delivered) and p not in left_out
        )

    def finish(self) -> None:
        for generation in (self._restore, self._generation):
            if generation is not None:
                generation.stop(self._settings.node.shutdown_timeout_s)
        self._restore = self._generation = None

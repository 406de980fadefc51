"""Roles are start lists: which components a node runs, in start order (stop is the reverse).

Stop order matters and follows from the start order: ingest stops taking input first, the
push worker stops scanning, senders drain the queue, the producer flushes (acks arrive), and
the progress worker makes its final seek commit last.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Collection
from functools import partial

import structlog
from confluent_kafka.admin import AdminClient

from chronos.delivery.deadletter import TOPIC_CHECK_TIMEOUT_S, DeadLetterPolicy
from chronos.delivery.pacing import Pacing
from chronos.errors import ConfigError
from chronos.group import announcement
from chronos.group.announcement import Announcer
from chronos.group.election import Election
from chronos.group.follower import ProgressLog
from chronos.group.lane import Lane, MasterState
from chronos.group.master_watch import MasterWatch
from chronos.group.placement import ReplicaStore
from chronos.group.replica import Elector, Replica
from chronos.group.spec import GroupSpec
from chronos.group.transactions import TransactionLoop
from chronos.kafka.admin import StableEnds, unwritable_topics
from chronos.kafka.publisher import TransactionalPublisher
from chronos.lifecycle import Component
from chronos.node.checkpointer import CheckpointWorker
from chronos.node.cut_publisher import CutPublisher
from chronos.node.decoder_process import DecoderProcess
from chronos.node.delete import DeleteWorker
from chronos.node.expiry import ExpiryWriter, id_partition
from chronos.node.ingest import IngestWorker
from chronos.node.inner_reader import BatchSource, DecodedBatch, InnerReader, ReaderSpec
from chronos.node.partitions import thread_shares
from chronos.node.policy_follower import PolicyFollower
from chronos.node.progress import ProgressTracker, ProgressWorker
from chronos.node.push import JobQueue, PushWorker
from chronos.node.refresh import REFRESH_PRODUCER, RefreshWorker
from chronos.node.reporter import MetricsReporter
from chronos.node.restater import Restater
from chronos.node.sender import RetrySchedule, Sender
from chronos.node.watermark import WatermarkProbe
from chronos.runtime.context import NodeContext
from chronos.schedule.floor import RebuildFloor
from chronos.settings import ChronosSettings, DecoderPlace

Role = Callable[[NodeContext], list[Component]]


#: How often a node alone publishes its cut: the most a wiped store delivers again, plus the
#: seek's lag behind acknowledgements (``node/cut_publisher.py``).
_CUT_INTERVAL_S = 1.0

log = structlog.get_logger(__name__)


def _ingest(ctx: NodeContext, owned: list[int]) -> list[IngestWorker]:
    s = ctx.settings
    names = s.topics.names
    # An offset no longer in the topic is an error, not a silent jump to its start: the
    # records between were lost to this store (IngestWorker ends the node).
    config = ctx.clients.consumer_config(
        names.node_group(s.node.node_id), **{"auto.offset.reset": "error"}
    )
    workers: list[IngestWorker] = []
    for i, partitions in enumerate(thread_shares(owned, s.node.ingest_threads)):
        spec = ReaderSpec.of_ingest(s, config, partitions)
        workers.append(
            IngestWorker(
                index=i,
                partitions=spec.partitions,
                open_source=partial(
                    _source, spec, s.node.ingest_decoder, ctx, f"chronos-decoder-{i}"
                ),
                ledger=ctx.ledger,
                dead_letters=ctx.dead_letters,
                clock=ctx.clock,
                poll_timeout_ms=s.node.ingest_poll_timeout_ms,
                metrics=ctx.metrics,
                on_fatal=ctx.fatal.report,
                watermark=ctx.watermark,
            )
        )
    return workers


def _watermark_probe(ctx: NodeContext) -> WatermarkProbe:
    """Asks Kafka where the owned inner partitions end, for the cancel gate."""
    s = ctx.settings
    interval_ms = s.node.watermark_interval_ms
    # Kafka takes a request timeout of at most an hour; a probe waits far less.
    timeout_s = min(30.0, max(1.0, 20 * interval_ms / 1000.0))
    inner = s.topics.names.inner
    ends = (
        StableEnds(ctx.clients.admin, inner, ctx.owned, timeout_s)
        if ctx.ends_for is None
        else ctx.ends_for(inner, ctx.owned, True)
    )
    return WatermarkProbe(ctx.watermark, ends, ctx.clock, interval_ms)


def _source(spec: ReaderSpec, decoder: DecoderPlace, ctx: NodeContext, name: str) -> BatchSource:
    """A new reader for one ingest thread, where the settings want it to decode."""
    if decoder == "process":
        watermark = ctx.watermark

        def read(batch: DecodedBatch) -> None:
            watermark.read(batch.offsets, batch.appended, batch.hazard)

        return DecoderProcess(name, spec, ctx.settings.log, on_read=read)
    return InnerReader(spec, ctx.clock.now_ms)


def _at_least_once(
    ctx: NodeContext, ingest: list[IngestWorker], published: CutPublisher
) -> list[Component]:
    """A node alone's delivery: push worker -> bounded queue -> senders -> publisher; the
    progress worker persists the seek as acknowledgements come in, ``published`` tells
    Kafka. A store being rebuilt finishes that before the push worker starts."""
    s = ctx.settings
    tracker = ProgressTracker(
        ctx.ledger.seek_ms, ctx.metrics, ctx.clock, keep_outcomes=s.admin.keeps_outcomes
    )
    jobs: JobQueue = JobQueue(maxsize=s.node.queue_batches)
    retries = RetrySchedule()
    policy = DeadLetterPolicy.of(s.delivery, ctx.publisher, policies=ctx.policies)
    pacing = Pacing(ctx.policies, ctx.metrics)

    def caught_up() -> bool:
        return all(w.caught_up.is_set() for w in ingest)

    gate = caught_up if ctx.rebuild is None else ctx.rebuild.gate(caught_up)
    senders: list[Component] = [
        Sender(
            index=i,
            jobs=jobs,
            retries=retries,
            publisher=ctx.publisher,
            dead_letters=ctx.dead_letters,
            policy=policy,
            tracker=tracker,
            clock=ctx.clock,
            metrics=ctx.metrics,
            attempts=ctx.attempts,
            pacing=pacing,
            # Senders drain first; the publisher's flush and the last progress follow.
            drain_timeout_s=s.node.shutdown_timeout_s / 2,
        )
        for i in range(s.node.sender_threads)
    ]
    push = PushWorker(
        store=ctx.store,
        ledger=ctx.ledger,
        frontier=ctx.frontier,
        tracker=tracker,
        jobs=jobs,
        clock=ctx.clock,
        batch_max=s.node.push_batch_max,
        metrics=ctx.metrics,
        start_gate=gate,
        # A rebuild must finish first, however long ingest takes: it knows what not to
        # deliver again.
        gate_timeout_s=s.node.catch_up_timeout_s if ctx.rebuild is None else math.inf,
        max_in_flight=s.node.max_in_flight,
        max_unpersisted_s=s.node.max_unpersisted_s,
        cancel_gate=ctx.watermark,
        catch_up_window_ms=int(s.delivery.catch_up_window_s * 1000),
        scan_gap_ms=s.delivery.scan_gap_ms,
    )
    return [
        ProgressWorker(
            tracker, ctx.ledger, s.node.progress_interval_ms, published.repeats_committed
        ),
        ctx.publisher,
        *senders,
        push,
    ]


def alone(ctx: NodeContext) -> list[Component]:
    """A node without a group: ingests everything and delivers at least once."""
    ingest = _ingest(ctx, ctx.owned)
    s = ctx.settings
    published = CutPublisher(
        frontier=ctx.frontier,
        ledger=ctx.ledger,
        # It flushes its last records itself at a stop, within its own limit: Kafka gone, a
        # second wait in the publisher's stop outlasted node.shutdown_timeout_s.
        publisher=ctx.clients.idempotent("progress", stop_flush_s=0.0),
        topic=s.topics.names.alone_progress(s.node.node_id),
        node_id=s.node.node_id,
        floor=ctx.floor,
        interval_s=_CUT_INTERVAL_S,
        clock=ctx.clock,
        published=ctx.published.cut,
        ready=(lambda: True)
        if ctx.rebuild is None
        else (lambda: ctx.rebuild is not None and ctx.rebuild.done),
    )
    return [
        MetricsReporter(ctx.metrics, ctx.ledger),
        # Read to its end before anything delivers.
        _policy_follower(ctx),
        # Before the progress worker: it stops after it and publishes the final seek.
        published,
        *_at_least_once(ctx, ingest, published),
        *ingest,
        _watermark_probe(ctx),
        _keeper(ctx, ctx.floor),
        *_deleter(ctx, lambda: ctx.rebuild is None or ctx.rebuild.done),
        CheckpointWorker(
            ctx.store, ctx.settings.node.data_dir, root=ctx.settings.node.checkpoint_dir
        ),
    ]


def _policy_follower(ctx: NodeContext) -> PolicyFollower:
    """What applies the policies set live (``chronos policy``) to ``ctx.policies``."""
    node_id = ctx.settings.node.node_id
    names = ctx.settings.topics.names
    errors = ctx.clients.errors("policies")
    return PolicyFollower(
        names.policy,
        ctx.clients.consumer(
            names.progress_reader_group(node_id, "policy"), errors, {"enable.auto.commit": False}
        ),
        errors,
        ctx.policies,
    )


def _deleter(ctx: NodeContext, delivering: Callable[[], bool]) -> list[Component]:
    """The delete worker; in compact mode with the producer of the expiry tombstones it writes
    while ``delivering`` (``node/expiry.py``), bulk and off the delivery path."""
    s = ctx.settings
    if s.rebuild.mode != "compact":
        return [DeleteWorker(ctx.ledger, s.delete)]
    publisher = ctx.clients.idempotent("expiry", REFRESH_PRODUCER)
    stopping = threading.Event()
    writer = ExpiryWriter(
        publisher=publisher,
        inner_topic=s.topics.names.inner,
        partition=id_partition(ctx.owned, ctx.inner_partitions),
        delivering=delivering,
        rate=s.rebuild.refresh_rate,
        metrics=ctx.metrics,
        stopping=stopping,
    )
    return [publisher, DeleteWorker(ctx.ledger, s.delete, writer, stopping)]


def _keeper(ctx: NodeContext, floor: RebuildFloor) -> Component:
    """What keeps every live message in Kafka while this node delivers: the restater on a
    compacted inner topic, refresh passes otherwise (``rebuild.mode``); a node alone's once
    its rebuild, if any, finished (the slots it states must be settled)."""
    rebuild = ctx.rebuild
    ready = (lambda: True) if rebuild is None else (lambda: rebuild.done)
    if ctx.settings.rebuild.mode == "compact":
        return Restater(
            store=ctx.store,
            ledger=ctx.ledger,
            publisher=ctx.publisher,
            inner_topic=ctx.settings.topics.names.inner,
            clock=ctx.clock,
            tombstone_retention_ms=int(ctx.settings.delete.tombstone_retention_s * 1000),
            ready=ready,
        )
    return RefreshWorker(
        store=ctx.store,
        inner_offsets=lambda: ctx.ledger.inner_offsets(ctx.owned),
        open_publisher=lambda: ctx.clients.idempotent("refresh", REFRESH_PRODUCER),
        inner_topic=ctx.settings.topics.names.inner,
        floor=floor,
        settings=ctx.settings.rebuild,
        clock=ctx.clock,
        metrics=ctx.metrics,
        ready=ready,
    )


def _replica(
    ctx: NodeContext,
    spec: GroupSpec,
    store: ReplicaStore,
    owned: list[int],
    ingest: list[IngestWorker],
) -> Replica:
    """The controller of a replica's role, with the group's Kafka clients."""
    s = ctx.settings
    clients = ctx.clients

    def own_election(on_change: Callable[[bool], None]) -> Elector:
        return Election(spec, clients.consumer, clients.errors("election"), on_change)

    open_election = ctx.open_election or own_election

    def open_publisher() -> TransactionalPublisher:
        return clients.transactional(spec.transactional_id, spec.settings.transaction_timeout_ms)

    admins: list[AdminClient] = []  # made at the first question: most terms never ask one

    def unwritable(topics: Collection[str]) -> set[str]:
        if not admins:
            admins.append(clients.admin())
        return unwritable_topics(admins[0], topics, TOPIC_CHECK_TIMEOUT_S)

    def new_master(publisher: TransactionalPublisher, state: MasterState) -> TransactionLoop:
        policy = DeadLetterPolicy.of(
            s.delivery, publisher, unwritable=unwritable, policies=ctx.policies
        )
        lane = Lane(
            progress_topic=spec.progress_topic,
            store=ctx.store,
            ledger=ctx.ledger,
            replica=store,
            frontier=ctx.frontier,
            state=state,
            policy=policy,
            clock=ctx.clock,
            attempts=ctx.attempts,
            policies=ctx.policies,
            cancel_gate=ctx.watermark,
        )
        return TransactionLoop(
            spec=spec,
            publisher=publisher,
            lanes=[lane],
            retry=s.delivery,
            clock=ctx.clock,
            metrics=ctx.metrics,
            keep_outcomes=s.admin.keeps_outcomes,
        )

    def new_refresher(floor: RebuildFloor) -> Component:
        return _keeper(ctx, floor)

    return Replica(
        spec=spec,
        partitions=owned,
        store=store,
        open_election=open_election,
        progress=ProgressLog(
            spec.progress_topic,
            spec.progress_reader_group("node"),
            clients.consumer,
            clients.errors("progress"),
        ),
        open_publisher=open_publisher,
        new_master=new_master,
        new_refresher=new_refresher,
        origin=ctx.origin,
        ingest_ready=lambda: all(w.caught_up.is_set() for w in ingest),
        fatal=ctx.fatal,
        clock=ctx.clock,
        metrics=ctx.metrics,
        watch=_master_watch(ctx, spec),
        announcer=_announcer(ctx, spec),
    )


def _announcer(ctx: NodeContext, spec: GroupSpec) -> Announcer:
    """Says the replica's state in the members topic through the node's own publisher (an
    announcement is advisory: its outcome is not waited for)."""
    publisher = ctx.publisher

    def produce(key: bytes, value: bytes) -> None:
        publisher.publish(spec.members_topic, key, value, [], _ignored)

    return Announcer(spec.node_id, produce, ctx.clock, announcement.INTERVAL_S)


def _ignored(error: object, message: object) -> None:
    """An announcement's outcome: the next one replaces a lost one."""


def _master_watch(ctx: NodeContext, spec: GroupSpec) -> MasterWatch:
    """The backup's failure detector: the progress topic's end (high watermark) moving."""
    ends = (
        StableEnds(ctx.clients.admin, spec.progress_topic, [0], 0.5, committed=False)
        if ctx.ends_for is None
        else ctx.ends_for(spec.progress_topic, [0], False)
    )
    return MasterWatch(lambda: ends()[0], spec.settings.suspect_after_ms / 1000.0)


def replica(ctx: NodeContext) -> list[Component]:
    """A member of a replica group: ingests everything; delivers only while elected master,
    in fenced transactions, and otherwise follows the master's committed progress."""
    if ctx.group is None or ctx.replica_store is None:
        raise ConfigError("a replica needs group.name")
    owned = ctx.owned
    ingest = _ingest(ctx, owned)
    role = _replica(ctx, ctx.group, ctx.replica_store, owned, ingest)
    # A cluster's partitions are replicas of a node each: they keep the configured policies.
    follower = [] if ctx.open_election is not None else [_policy_follower(ctx)]
    return [
        MetricsReporter(ctx.metrics, ctx.ledger),
        *follower,
        ctx.publisher,  # ingest's dead letters and refresh records: every replica has its own
        *ingest,
        _watermark_probe(ctx),
        role,
        *_deleter(ctx, lambda: role.role == "master"),
        CheckpointWorker(
            ctx.store, ctx.settings.node.data_dir, root=ctx.settings.node.checkpoint_dir
        ),
    ]


ROLES: dict[str, Role] = {"alone": alone, "replica": replica}


def role_of(settings: ChronosSettings) -> str:
    """The role the settings ask for: ``replica`` when they name a group."""
    return "replica" if settings.group.name is not None else "alone"

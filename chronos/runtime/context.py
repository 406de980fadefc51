"""The shared objects of one node, built once and handed to the components of its role."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import structlog

from chronos.clock import Clock
from chronos.delivery.attempts import Attempts
from chronos.delivery.deadletter import DeadLetters
from chronos.delivery.policies import Policies
from chronos.errors import ConfigError
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.published import Published, read_published
from chronos.group.replica import OpenElection
from chronos.group.spec import GroupSpec
from chronos.kafka.admin import partition_count
from chronos.kafka.clients import KafkaClients
from chronos.kafka.publishers.idempotent import IdempotentPublisher
from chronos.kafka.shared_ends import EndsFor
from chronos.lifecycle import Fatal
from chronos.metrics import CountingMetrics
from chronos.node.partitions import owned_partitions
from chronos.node.watermark import IngestWatermark
from chronos.runtime.origin import establish_origin
from chronos.runtime.rebuild import AloneRebuild
from chronos.schedule.floor import RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import ALONE, Ledger, resume_frontier
from chronos.schedule.origin import StoreOrigin
from chronos.settings import ChronosSettings
from chronos.store.rocks import RocksStore

log = structlog.get_logger(__name__)

_PUBLISHER_LINGER_MS = 5


@dataclass
class NodeContext:
    """Everything components of either role share; no globals.

    Parameters:
        group: the replica group this node belongs to, None for a node alone.
        replica_store: a replica's writes beyond ingest (None for a node alone).
        publisher: the idempotent publisher: a node alone's deliveries, and every node's
            ingest dead letters (not transactional: each replica sends its own).
        owned: the inner partitions this node ingests.
        inner_partitions: how many partitions the inner topic has.
        origin: where its store's ingest began (complete or not, see ``schedule/origin.py``).
        floor: the rebuild floor this node publishes while it delivers.
        rebuild: a node alone rebuilding its empty store from Kafka (``runtime/rebuild.py``).
        published: the progress this node (alone) or its group published, as read at start.
        watermark: how far ingest has applied what Kafka acknowledged (the cancel gate).
        open_election: what tells a replica whether it should lead; None: its group's own
            election (a cluster's partition is told by the cluster's placement instead).
        ends_for: where the questions about partition ends go (a cluster node's replicas share
            one request, ``kafka/shared_ends.py``); None: each asks on its own.
        attempts: failed delivery attempts, for the status lookup.
        policies: the delivery policy of each target topic, configured or set live.
    """

    settings: ChronosSettings
    clock: Clock
    fatal: Fatal
    clients: KafkaClients
    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    publisher: IdempotentPublisher
    dead_letters: DeadLetters
    metrics: CountingMetrics
    group: GroupSpec | None
    replica_store: ReplicaStore | None
    owned: list[int]
    inner_partitions: int
    origin: StoreOrigin
    floor: RebuildFloor
    rebuild: AloneRebuild | None = None
    published: Published = field(default_factory=lambda: Published(None, {}))
    watermark: IngestWatermark = field(default_factory=lambda: IngestWatermark({}, 0))
    open_election: OpenElection | None = None
    ends_for: EndsFor | None = None
    attempts: Attempts = field(default_factory=Attempts)
    policies: Policies = field(default_factory=lambda: Policies({}))


def build_context(settings: ChronosSettings, clock: Clock) -> NodeContext:
    """Open the store and wire the shared objects together."""
    fatal = Fatal()
    clients = KafkaClients(
        settings.kafka, settings.node.node_id, settings.limits.max_message_bytes, fatal.report
    )
    store = RocksStore(settings.node.data_dir, settings.store)
    group = GroupSpec.of(settings)
    published = Published(None, {})
    try:
        owned, inner_partitions = _owned(settings, store)
        published = read_published(settings, clients)
        # Before anything reads the store: it may be cleared.
        origin = establish_origin(
            settings, store, owned, None if published.cut is None else published.cut.floor
        )
        if group is None:
            _refuse_incomplete(settings, origin, published)
    except BaseException:
        store.close()
        raise
    frontier = Frontier(resume_frontier(store))
    metrics = CountingMetrics()
    # A replica starts following and records where each add came from (chronos/group/); so
    # does a node alone that rebuilds its empty store from what it published.
    rebuilding = group is None and origin.fresh and published.cut is not None
    placement = ReplicaPlacement() if group is not None or rebuilding else ALONE
    # Compact mode: every replica notes what the delivering node must restate.
    restates = settings.rebuild.mode == "compact"
    ledger = Ledger(store, frontier, clock, settings.delete, placement, restates=restates)
    replica_store = (
        ReplicaStore(store, frontier, ledger, placement)
        if isinstance(placement, ReplicaPlacement)
        else None
    )
    publisher = clients.idempotent(
        "publisher",
        {
            "message.timeout.ms": settings.delivery.message_timeout_ms,
            # Deliveries come in bursts of due keys: a few ms of linger packs them into
            # fewer produce requests, and request handling, not bytes, is what costs the
            # broker CPU on a shared box (see docs/benchmarks/README.md).
            "linger.ms": _PUBLISHER_LINGER_MS,
        },
    )
    return NodeContext(
        settings=settings,
        clock=clock,
        fatal=fatal,
        clients=clients,
        store=store,
        frontier=frontier,
        ledger=ledger,
        publisher=publisher,
        dead_letters=DeadLetters(
            publisher, settings.topics.names.dead_letter, metrics, fatal.report
        ),
        metrics=metrics,
        group=group,
        replica_store=replica_store,
        owned=owned,
        inner_partitions=inner_partitions,
        origin=origin,
        floor=RebuildFloor(None if published.cut is None else published.cut.floor),
        published=published,
        # A node that owns some of the partitions paces its share of each topic's rate.
        policies=Policies(settings.delivery.topics, rate_share=_share(owned, inner_partitions)),
        watermark=IngestWatermark(
            ledger.inner_offsets(owned), settings.node.cancel_margin_ms, owned, clock
        ),
        rebuild=(
            AloneRebuild(published, store, replica_store, placement, owned, restates)
            if rebuilding and replica_store is not None and isinstance(placement, ReplicaPlacement)
            else None
        ),
    )


def _refuse_incomplete(
    settings: ChronosSettings, origin: StoreOrigin, published: Published
) -> None:
    """A node alone is the only one that could refresh what it holds: a store that began after
    records it needed were removed stays incomplete, and it says so instead of starting."""
    floor = None if published.cut is None else published.cut.floor
    missing = origin.missing(floor)
    if not missing:
        return
    message = (
        f"the store in {settings.node.data_dir} began reading the inner topic at {missing} "
        f"(partition: offset), after records it needs were removed (published rebuild floor: "
        f"{None if floor is None else floor.offsets}): pending messages recorded only there "
        "are lost"
    )
    if not settings.rebuild.accept_incomplete:
        raise ConfigError(message + "; set rebuild.accept_incomplete = true to start without them")
    log.error(
        "store_incomplete", detail=message, action="started anyway (rebuild.accept_incomplete)"
    )


def _owned(settings: ChronosSettings, store: RocksStore) -> tuple[list[int], int]:
    """The inner partitions this node ingests, and how many the topic has; refuses a store
    that holds others.

    Their pending messages would still be delivered while their cancels went to another node,
    and that node, starting without them, would deliver them again: ownership stays with a
    store for its life.
    """
    count = partition_count(settings, settings.topics.names.inner)
    owned = owned_partitions(settings.node.owned_partitions, count)
    foreign = sorted(set(store.read_inner_offsets(list(range(count)))) - set(owned))
    if foreign:
        raise ConfigError(
            f"the store in {settings.node.data_dir} holds inner partitions {foreign}, "
            f"which node.owned_partitions {owned} leaves out: a store keeps the partitions it "
            "was filled from (see docs/operations.md)"
        )
    log.info("ingest_partitions", owned=owned, inner_partitions=count)
    return owned, count


def _share(owned: Collection[int], inner_partitions: int) -> float:
    """The share of the inner topic's partitions a node delivers (1 when it owns them all)."""
    return min(1.0, len(owned) / inner_partitions) if owned and inner_partitions > 0 else 1.0

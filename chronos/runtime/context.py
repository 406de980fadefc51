"""The shared objects of one node, built once and handed to the components of its role."""

from __future__ import annotations

from dataclasses import dataclass

from chronos.clock import Clock
from chronos.delivery.deadletter import DeadLetters
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.kafka.clients import KafkaClients
from chronos.kafka.publishers.idempotent import IdempotentPublisher
from chronos.lifecycle import Fatal
from chronos.metrics import CountingMetrics
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import ALONE, Ledger
from chronos.settings import ChronosSettings
from chronos.store.rocks import RocksStore

_PUBLISHER_LINGER_MS = 5


@dataclass
class NodeContext:
    """Everything components of either role share; no globals.

    Parameters:
        group: the replica group this node belongs to, None for a node alone.
        replica_store: a replica's writes beyond ingest (None for a node alone).
        publisher: the idempotent publisher: a node alone's deliveries, and every node's
            ingest dead letters (not transactional: each replica sends its own).
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


def build_context(settings: ChronosSettings, clock: Clock) -> NodeContext:
    """Open the store and wire the shared objects together."""
    fatal = Fatal()
    clients = KafkaClients(
        settings.kafka, settings.node.node_id, settings.limits.max_message_bytes, fatal.report
    )
    store = RocksStore(settings.node.data_dir, settings.store)
    frontier = Frontier(store.read_seek() or 0)
    metrics = CountingMetrics()
    group = GroupSpec.of(settings)
    # A replica starts following and records where each add came from (chronos/group/).
    placement = ReplicaPlacement() if group is not None else ALONE
    ledger = Ledger(store, frontier, clock, settings.delete, placement)
    replica_store = (
        ReplicaStore(store, frontier, ledger, placement)
        if isinstance(placement, ReplicaPlacement)
        else None
    )
    publisher = clients.idempotent(
        "publisher",
        **{
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
    )

"""The shared objects of one node, built once and handed to the components of its role."""

from __future__ import annotations

import queue
from dataclasses import dataclass

from chronos.clock import Clock
from chronos.kafka.producer import Delivery
from chronos.metrics import CountingMetrics
from chronos.node.deadletter import DeadLetters
from chronos.node.frontier import Frontier
from chronos.node.job import DeliveryJob
from chronos.node.ledger import Ledger
from chronos.node.progress import ProgressTracker
from chronos.node.sender import RetrySchedule
from chronos.settings import ChronosSettings
from chronos.store.rocks import RocksStore

_DELIVERY_LINGER_MS = 5


@dataclass
class NodeContext:
    """Everything components share; no globals."""

    settings: ChronosSettings
    clock: Clock
    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    tracker: ProgressTracker
    jobs: queue.Queue[list[DeliveryJob]]
    retries: RetrySchedule
    delivery: Delivery
    dead_letters: DeadLetters
    metrics: CountingMetrics


def build_context(settings: ChronosSettings, clock: Clock) -> NodeContext:
    """Open the store and wire the shared objects together."""
    store = RocksStore(settings.node.data_dir, settings.store)
    seek = store.read_seek() or 0
    frontier = Frontier(seek)
    metrics = CountingMetrics()
    delivery = Delivery(
        settings.kafka.producer(
            settings.limits.max_message_bytes,
            **{
                "message.timeout.ms": settings.delivery.message_timeout_ms,
                # Deliveries come in bursts of due keys: a few ms of linger packs them into
                # fewer produce requests, and request handling, not bytes, is what costs the
                # broker CPU on a shared box (see docs/benchmarks/README.md).
                "linger.ms": _DELIVERY_LINGER_MS,
            },
        ),
        name="delivery",
    )
    return NodeContext(
        settings=settings,
        clock=clock,
        store=store,
        frontier=frontier,
        # A replica starts as a follower and records where each add came from (chronos/group/).
        ledger=Ledger(
            store,
            frontier,
            clock,
            settings.delete,
            track_arrivals=settings.group.name is not None,
            leading=settings.group.name is None,
        ),
        tracker=ProgressTracker(seek, metrics, clock),
        jobs=queue.Queue(maxsize=settings.node.queue_batches),
        retries=RetrySchedule(),
        delivery=delivery,
        dead_letters=DeadLetters(delivery, settings.topics.names.dead_letter, metrics),
        metrics=metrics,
    )

"""Roles are start lists: which components a node runs, in start order (stop is the reverse).

Stop order matters and follows from the start order: ingest stops taking input first, the
push worker stops scanning, senders drain the queue, the producer flushes (acks arrive), and
the progress worker makes its final seek commit last.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import structlog

from chronos.errors import ConfigError
from chronos.group.replica import Replica
from chronos.kafka.admin import partition_count
from chronos.node.checkpointer import CheckpointWorker
from chronos.node.component import Component
from chronos.node.context import NodeContext
from chronos.node.decoder_process import DecoderProcess
from chronos.node.delete import DeleteWorker
from chronos.node.ingest import IngestWorker
from chronos.node.inner_reader import BatchSource, InnerReader, ReaderSpec
from chronos.node.progress import ProgressWorker
from chronos.node.push import PushWorker
from chronos.node.reporter import MetricsReporter
from chronos.node.sender import Sender
from chronos.settings import ChronosSettings, DecoderPlace

Role = Callable[[NodeContext], list[Component]]

log = structlog.get_logger(__name__)


def _owned(ctx: NodeContext) -> list[int]:
    s = ctx.settings
    count = partition_count(s, s.topics.names.inner)
    owned = owned_partitions(s.node.owned_partitions, count)
    _check_store_owns(ctx, owned, count)
    log.info("ingest_partitions", owned=owned, inner_partitions=count)
    return owned


def _ingest(ctx: NodeContext, owned: list[int]) -> list[IngestWorker]:
    s = ctx.settings
    names = s.topics.names
    config = s.kafka.consumer(names.node_group(s.node.node_id))
    workers: list[IngestWorker] = []
    for i, partitions in enumerate(thread_shares(owned, s.node.ingest_threads)):
        spec = ReaderSpec(
            config,
            names.inner,
            partitions,
            s.limits,
            names,
            s.node.ingest_batch_max,
            s.node.ingest_poll_timeout_ms / 1000.0,
        )
        workers.append(
            IngestWorker(
                i,
                spec.partitions,
                partial(_source, spec, s.node.ingest_decoder, ctx, f"chronos-decoder-{i}"),
                ctx.ledger,
                ctx.dead_letters,
                ctx.clock,
                s.node.ingest_poll_timeout_ms,
                ctx.metrics,
            )
        )
    return workers


def owned_partitions(configured: list[int], count: int) -> list[int]:
    """The inner partitions a node reads: those configured (all when none), each existing."""
    if not configured:
        return list(range(count))
    missing = sorted({p for p in configured if not 0 <= p < count})
    if missing:
        raise ConfigError(
            f"node.owned_partitions {missing} do not exist: the inner topic has {count} "
            f"partitions (0-{count - 1})"
        )
    return sorted(set(configured))


def thread_shares(owned: list[int], threads: int) -> list[list[int]]:
    """Partitions per ingest thread, round robin; no more threads than partitions."""
    threads = min(threads, len(owned))
    return [owned[i::threads] for i in range(threads)]


def _check_store_owns(ctx: NodeContext, owned: list[int], count: int) -> None:
    """Refuse a store that holds partitions this node no longer owns.

    Its pending messages of those partitions would still be delivered while their cancels went
    to another node, and that node, starting without them, would deliver them again: ownership
    stays with a store for its life.
    """
    foreign = sorted(set(ctx.ledger.inner_offsets(list(range(count)))) - set(owned))
    if foreign:
        raise ConfigError(
            f"the store in {ctx.settings.node.data_dir} holds inner partitions {foreign}, "
            f"which node.owned_partitions {owned} leaves out: a store keeps the partitions it "
            "was filled from (see README, Operations)"
        )


def _source(spec: ReaderSpec, decoder: DecoderPlace, ctx: NodeContext, name: str) -> BatchSource:
    """A new reader for one ingest thread, where the settings want it to decode."""
    if decoder == "process":
        return DecoderProcess(name, spec, ctx.settings.log)
    return InnerReader(spec, ctx.clock.now_ms)


def _delivery(ctx: NodeContext, ingest: list[IngestWorker]) -> list[Component]:
    s = ctx.settings
    senders: list[Component] = [
        Sender(
            i,
            ctx.jobs,
            ctx.retries,
            ctx.delivery,
            ctx.dead_letters,
            ctx.tracker,
            ctx.clock,
            s.delivery,
            ctx.metrics,
            # Senders drain first; the producer's flush and the last progress follow.
            drain_timeout_s=s.node.shutdown_timeout_s / 2,
        )
        for i in range(s.node.sender_threads)
    ]
    push = PushWorker(
        ctx.store,
        ctx.ledger,
        ctx.frontier,
        ctx.tracker,
        ctx.jobs,
        ctx.clock,
        s.node.push_batch_max,
        ctx.metrics,
        start_gate=lambda: all(w.caught_up.is_set() for w in ingest),
        gate_timeout_s=s.node.catch_up_timeout_s,
        max_in_flight=s.node.max_in_flight,
        max_unpersisted_s=s.node.max_unpersisted_s,
    )
    return [ctx.delivery, *senders, push]


def alone(ctx: NodeContext) -> list[Component]:
    """A node without a group: ingests everything and delivers at least once."""
    ingest = _ingest(ctx, _owned(ctx))
    return [
        MetricsReporter(ctx.metrics, ctx.ledger),
        ProgressWorker(ctx.tracker, ctx.ledger, ctx.settings.node.progress_interval_ms),
        *_delivery(ctx, ingest),
        *ingest,
        DeleteWorker(ctx.ledger, ctx.settings.delete),
        CheckpointWorker(ctx.store, ctx.settings.node.data_dir),
    ]


def replica(ctx: NodeContext) -> list[Component]:
    """A member of a replica group: ingests everything; delivers only while elected master,
    in fenced transactions, and otherwise follows the master's committed progress."""
    owned = _owned(ctx)
    return [
        MetricsReporter(ctx.metrics, ctx.ledger),
        ctx.delivery,  # ingest's dead letters: not transactional, every replica sends them
        *_ingest(ctx, owned),
        Replica(ctx, owned),
        DeleteWorker(ctx.ledger, ctx.settings.delete),
        CheckpointWorker(ctx.store, ctx.settings.node.data_dir),
    ]


ROLES: dict[str, Role] = {"alone": alone, "replica": replica}


def role_of(settings: ChronosSettings) -> str:
    """The role the settings ask for: ``replica`` when they name a group."""
    return "replica" if settings.group.name is not None else "alone"

#!/usr/bin/env python3
"""What the delivery transaction over lanes saves: one producer and one transaction for every
partition a node delivers, against one producer and transaction per partition (issue 61).

For each of ``--partitions`` N, in one run on one broker, this process delivers N partitions'
schedules (one RocksDB, a schedule per partition) in two shapes, one after the other:

* ``lanes``: one ``TransactionLoop`` over N lanes, one transactional producer (the new shape;
  an idle lane writes no cut after its first: ``idle_cuts=False``);
* ``node-log``: as ``lanes``, each lane's cut to the node's progress log (one partition of one
  topic) unless it carries repeat states (``group/node_log.py``): what a cluster node runs;
* ``loops``: N ``TransactionLoop`` of one lane each, N producers, each lane's cut once per
  ``group.progress_interval_ms`` at rest (the transaction pattern of today's cluster, where
  each hosted partition is a replica group; without the rest of each replica's clients, so
  the gap measured here is the transactions' share only).

Each shape runs ``--seconds`` at rest (every lane's cut once per ``group.progress_interval_ms``)
and ``--seconds`` under ``--rate`` messages/s spread over the partitions (added to the stores
directly, due at once: the delivery path, not ingest). The figures: the broker's and this
process's CPU as a share of one core, and under load the CPU of both per delivered message.
Run it with the machine otherwise quiet: both shapes share it.

    python scripts/lanes_cost_check.py --partitions 1 16 64 --seconds 20 --rate 2000

``--shared-progress`` (an experiment, not a shape chronos has): every lane writes its cut to the
first partition's progress topic, to tell what the broker pays per partition a transaction
touches from what it pays per record.

``--interval-ms`` sets ``group.transaction_interval_ms`` (5 by default): the fewest ms between
two transactions, so how many messages and partitions one transaction carries.

The last line of output is the JSON summary; ``scaling`` gives, per shape, the CPU per message
at N partitions over that at 1 (when 1 is among ``--partitions``). Exit code 0 when the
``lanes`` and ``node-log`` shapes delivered every message added within 60 s of the load's end,
1 otherwise (``undelivered``; the ``loops`` shape is reported, not judged: with many
partitions it falls behind on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.bench.sampler import cpu_seconds, stage_delta, thread_cpu
from chronos.clock import SystemClock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.devstack.check import add_broker_options, finish, staged
from chronos.group.lane import Lane, MasterState
from chronos.group.node_log import NodeLog
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.group.transactions import TransactionLoop
from chronos.kafka.clients import KafkaClients
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.settings import ChronosSettings, StoreSettings
from chronos.store import codec
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore
from chronos.threadname import name_this_thread

#: Partitions of the target topic the load is delivered to.
TARGET_PARTITIONS = 6


@dataclass
class Window:
    """One shape's figures over one window."""

    broker_core_share: float
    process_core_share: float
    delivered: int = 0
    #: CPU µs of broker + this process per delivered message (under load only).
    us_per_message: float | None = None
    #: The same without the load's own thread (which adds one message per write, as no
    #: node's ingest does): the delivery path's cost per message.
    delivery_us_per_message: float | None = None
    #: This process' CPU seconds per thread kind (``transactions``, ``rdk``, ``loader``...).
    stages: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    partitions: int
    shape: str
    rest: Window
    load: Window
    added: int
    #: Added and not delivered within 60 s of the load's end.
    undelivered: int


@dataclass
class Summary:
    broker: str
    seconds: float
    rate: int
    rows: list[Row] = field(default_factory=list)
    #: Per partition count: loops / lanes, at rest (broker) and per message under load.
    ratios: dict[int, dict[str, float]] = field(default_factory=dict)
    #: Per shape and partition count: CPU per message under load over that at 1 partition.
    scaling: dict[str, dict[int, float]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        judged = ("lanes", "node-log")
        return all(row.undelivered == 0 for row in self.rows if row.shape in judged)


class _Partition:
    """One partition's schedule, leading from now."""

    def __init__(self, database: RocksDatabase, number: int, wake: Wake, target: str) -> None:
        self.number = number
        self.target = target
        self.store = RocksStore.of_partition(database, number)
        clock = SystemClock()
        self.frontier = Frontier(0, wake)
        placement = ReplicaPlacement()
        self.ledger = Ledger(self.store, self.frontier, clock, ChronosSettings().delete, placement)
        self.replica = ReplicaStore(self.store, self.frontier, self.ledger, placement)
        self.replica.lead(clock.now_ms() - 1, [number])
        self.offset = 0

    def add(self, message_id: str, due_ms: int) -> None:
        message = DelayMessage(message_id, self.target, None, b"x" * 100, [], due_ms)
        item = (Op.ADD, message_id, due_ms, codec.encode(message))
        p = self.number
        self.ledger.apply_decoded([item], {p: self.offset + 1}, [(p, self.offset)])
        self.offset += 1


def _settings(bootstrap: str, namespace: str, interval_ms: int) -> ChronosSettings:
    return ChronosSettings.model_validate(
        {
            "kafka": {"bootstrap_servers": bootstrap},
            "topics": {"namespace": namespace},
            "group": {"name": "lanes", "transaction_interval_ms": interval_ms},
        }
    )


def _run_shape(
    shape: str, partitions: int, args: argparse.Namespace, bootstrap: str, workdir: Path, pid: int
) -> Row:
    namespace = f"lc{uuid.uuid4().hex[:8]}"
    settings = _settings(bootstrap, namespace, args.interval_ms)
    spec = GroupSpec.of(settings)
    assert spec is not None
    progress = [f"{namespace}.progress.lanes.p{p}" for p in range(partitions)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    node_log = NodeLog(f"{namespace}.progress.lanes.nodes", 0)
    compacted = [*progress, node_log.topic]
    topics = [NewTopic(t, 1, 1, config={"cleanup.policy": "compact"}) for t in compacted]
    target = f"{namespace}.target"
    topics.append(NewTopic(spec.dead_letter_topic, 1, 1))
    topics.append(NewTopic(target, TARGET_PARTITIONS, 1))
    for future in admin.create_topics(topics).values():
        future.result(timeout=60)
    database = RocksDatabase(workdir / f"{shape}-{partitions}", StoreSettings(), range(partitions))
    wake = Wake()
    owned = [_Partition(database, p, wake, target) for p in range(partitions)]
    clients = KafkaClients(settings.kafka, f"lanes-{shape}")
    metrics = CountingMetrics()
    clock = SystemClock()
    loops: list[TransactionLoop] = []

    def lane_of(part: _Partition, publisher_policy: DeadLetterPolicy) -> Lane:
        return Lane(
            progress_topic=progress[0 if args.shared_progress else part.number],
            store=part.store,
            ledger=part.ledger,
            replica=part.replica,
            frontier=part.frontier,
            state=MasterState(1, print, print),
            policy=publisher_policy,
            clock=clock,
            partition=part.number,
        )

    groups = [[part] for part in owned] if shape == "loops" else [owned]
    for n, group in enumerate(groups):
        timeout = settings.group.transaction_timeout_ms
        publisher = clients.transactional(f"{namespace}.delivery.{n}", timeout)
        publisher.init(60)
        policy = DeadLetterPolicy.of(settings.delivery, publisher)
        lanes = [lane_of(part, policy) for part in group]
        loop = TransactionLoop(
            spec=spec,
            publisher=publisher,
            lanes=lanes,
            retry=settings.delivery,
            clock=clock,
            metrics=metrics,
            idle_cuts=shape == "loops",
            node_log=node_log if shape == "node-log" else None,
        )
        loops.append(loop)
        loop.start()
    try:
        time.sleep(2.0)  # every loop's first transactions, out of the window
        rest = _window(args.seconds, pid, args.broker_pid, metrics, None)
        added = [0]
        stop = threading.Event()

        def load() -> None:
            name_this_thread("loader")
            interval = 1.0 / args.rate
            start = time.monotonic()
            n = 0
            while not stop.is_set():
                now = time.monotonic()
                while n < (now - start) / interval:
                    owned[n % partitions].add(f"m{n}", clock.now_ms())
                    n += 1
                added[0] = n
                time.sleep(0.002)

        loader = threading.Thread(target=load, daemon=True)
        delivered_before = metrics.totals().get("delivered", 0)
        loader.start()
        under = _window(args.seconds, pid, args.broker_pid, metrics, delivered_before)
        stop.set()
        loader.join(10)
        deadline = time.monotonic() + 60
        while metrics.totals().get("delivered", 0) - delivered_before < added[0]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        delivered = metrics.totals().get("delivered", 0) - delivered_before
    finally:
        for loop in loops:
            loop.stop()
        for loop in loops:
            loop.join(30)
            loop.close()
        for part in owned:
            part.store.close()
        database.close()
    row = Row(partitions, shape, rest, under, added[0], max(0, added[0] - delivered))
    print(
        f"{shape:>8} x{partitions:<3} rest broker {rest.broker_core_share:.3f} "
        f"process {rest.process_core_share:.3f} | load broker {under.broker_core_share:.3f} "
        f"process {under.process_core_share:.3f} {under.us_per_message} us/msg "
        f"(without the loader {under.delivery_us_per_message}) undelivered {row.undelivered} "
        f"threads {under.stages}",
        flush=True,
    )
    return row


def _window(
    seconds: float,
    pid: int,
    broker_pid: int | None,
    metrics: CountingMetrics,
    delivered_before: int | None,
) -> Window:
    broker_before = cpu_seconds(broker_pid) if broker_pid else 0.0
    own_before = cpu_seconds(pid)
    threads_before = thread_cpu(pid)
    counted_before = metrics.totals().get("delivered", 0)
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    broker = (cpu_seconds(broker_pid) - broker_before) if broker_pid else 0.0
    own = cpu_seconds(pid) - own_before
    window = Window(round(broker / elapsed, 3), round(own / elapsed, 3))
    window.stages = stage_delta(threads_before, thread_cpu(pid))
    if delivered_before is not None:
        window.delivered = metrics.totals().get("delivered", 0) - counted_before
        if window.delivered:
            window.us_per_message = round((broker + own) * 1e6 / window.delivered, 1)
            delivery = broker + own - window.stages.get("loader", 0.0)
            window.delivery_us_per_message = round(delivery * 1e6 / window.delivered, 1)
    return window


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--seconds", type=float, default=20.0, help="each window")
    parser.add_argument("--rate", type=int, default=2000, help="messages/s under load")
    parser.add_argument(
        "--shared-progress", action="store_true", help="every cut to one topic (experiment)"
    )
    parser.add_argument("--interval-ms", type=int, default=5, help="transaction_interval_ms")
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=("lanes", "node-log", "loops"),
        default=["node-log", "lanes", "loops"],
    )
    parser.add_argument(
        "--broker-pid", type=int, default=None, help="with --bootstrap: the broker's process"
    )
    add_broker_options(parser)
    args = parser.parse_args()
    with staged(args, "lanes-cost") as stage:
        if stage.broker is not None:
            args.broker_pid = stage.broker.pid
        summary = Summary(stage.broker_name, args.seconds, args.rate)
        pid = os.getpid()
        for partitions in args.partitions:
            rows = {
                shape: _run_shape(shape, partitions, args, stage.bootstrap, stage.workdir, pid)
                for shape in args.shapes
            }
            summary.rows += rows.values()
            if "lanes" not in rows or "loops" not in rows:
                continue
            lanes, loops = rows["lanes"], rows["loops"]
            ratios: dict[str, float] = {}
            if lanes.rest.broker_core_share:
                ratio = loops.rest.broker_core_share / lanes.rest.broker_core_share
                ratios["rest_broker"] = round(ratio, 2)
            if lanes.load.us_per_message and loops.load.us_per_message:
                ratios["load_us_per_message"] = round(
                    loops.load.us_per_message / lanes.load.us_per_message, 2
                )
            summary.ratios[partitions] = ratios
        summary.scaling = _scaling(summary.rows)
        return finish(summary, stage.workdir)


def _scaling(rows: list[Row]) -> dict[str, dict[int, float]]:
    """Per shape: the delivery path's CPU per message (without the loader) at each partition
    count over that at 1 partition."""
    found: dict[str, dict[int, float]] = {}
    for row in rows:
        one = next((r for r in rows if r.shape == row.shape and r.partitions == 1), None)
        mine = row.load.delivery_us_per_message
        if one is None or not one.load.delivery_us_per_message or not mine:
            continue
        ratio = round(mine / one.load.delivery_us_per_message, 2)
        found.setdefault(row.shape, {})[row.partitions] = ratio
    return found


if __name__ == "__main__":
    raise SystemExit(main())

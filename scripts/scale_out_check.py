#!/usr/bin/env python3
"""Scale-out check: a cluster grown node by node under load, with a large pending state.

One node of a cluster (``--partitions`` inner partitions, ``--standbys`` standbys) first holds
``--pending`` messages due hours ahead (produced straight to the inner topic, as any producer of
the wire format may); then the failover check's load runs (``--rate`` requests/s, delays
``--delay`` s, 10 % cancels, 2 % repeats, 2 % reschedules) while the cluster grows to each
count of ``--steps`` (1,2,4: one node added, then two at once).

Per step it measures:

* per partition a new node now owns: ms from the node's start, and from its first placement
  naming it owner (its *assignment*), to its first delivery commit of that partition; the
  pending messages the node took over with them (``cold_pending``);
* per moved partition: the records the new owner read from the inner topic to restore it and
  the partition's bytes on the broker, against its pending count;
* lateness at ``read_committed`` visibility (received minus due) of the partitions whose owner
  did not change, from the step's start until every moved partition delivered (p50, p99, max),
  against the same before any step.

Afterwards a ``read_committed`` consumer must have seen every expected delivery exactly once,
none early and no cancelled one.

    python scripts/scale_out_check.py                          # 16 partitions, 1 M pending
    python scripts/scale_out_check.py --pending 200000 --steps 1,2
    python scripts/scale_out_check.py --shape node               # one engine per node

The last line of output is the JSON summary. Exit code 0 when every delivery check holds and
every cold node delivered its partitions within ``--cold-bound-s`` of its assignment.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster_check import Cluster, Layout
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported explicitly
from failover_check import Load, Summary, _epoch_ms, drain, verify

from chronos.bench.load import LoadSpec, generate
from chronos.cluster.placement import Placement
from chronos.devstack.check import Watched
from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.watch import Collected
from chronos.kafka.admin import create_topic
from chronos.kafka.partitioner import partition_of
from chronos.names import TopicNames
from chronos.quantiles import percentile
from chronos.settings import load_settings
from proxy.client import DelayClient


@dataclass
class MovedPartition:
    """One partition a step gave a new owner."""

    partition: int
    owner: str
    pending: int
    records_read: int
    bytes_on_broker: int
    from_start_ms: int
    from_assignment_ms: int


@dataclass
class Step:
    """One growth step."""

    nodes: int
    added: list[str]
    moved: list[MovedPartition] = field(default_factory=list)
    #: Per added node: pending messages in the partitions it owns, and the slowest of them.
    cold_pending: dict[str, int] = field(default_factory=dict)
    cold_slowest_ms: dict[str, int] = field(default_factory=dict)
    #: Until every moved partition delivered, from the step's start.
    settled_ms: int = 0
    unmoved_lateness_ms: dict[str, int] = field(default_factory=dict)


@dataclass
class ScaleSummary:
    pending: int = 0
    preload_s: float = 0.0
    ingested_s: float = 0.0
    before_lateness_ms: dict[str, int] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    cold_bound_s: float = 15.0
    cold_within_bound: bool = True


class EventTail:
    """A node's JSON log read incrementally: the events of interest, as they are appended
    (the node logs under load; parsing the whole file at every look starves the counting
    consumer in this process)."""

    def __init__(self, path: Path, names: set[str]) -> None:
        self._path = path
        self._names = names
        self._offset = 0
        self._partial = b""
        self.events: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        if self._path.exists():
            with self._path.open("rb") as log:
                log.seek(self._offset)
                chunk = log.read()
            self._offset += len(chunk)
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                if not line.startswith(b"{"):
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") in self._names:
                    self.events.append(event)
        return self.events


_EVENTS = {
    "cluster_placement",
    "master_first_commit",
    "ingest_assigned",
    # The node shape's (``cluster.shape = "node"``).
    "member_placement",
    "lane_first_commit",
}


def _partition_of_replica(event: dict[str, Any]) -> int:
    return int(str(event["node"]).rsplit(".p", 1)[1])


def _first_commit_of(event: dict[str, Any], partition: int) -> bool:
    """Whether ``event`` is a first delivery commit of ``partition``: a replica's (the
    partition shape) or a member's lane's (the node shape)."""
    if event["event"] == "lane_first_commit":
        return event.get("partition") == partition
    # A member's loop logs its own first commit too, under the node's plain id.
    replica = str(event.get("node", ""))
    return (
        event["event"] == "master_first_commit"
        and ".p" in replica
        and (_partition_of_replica(event) == partition)
    )


def _placed_owner(event: dict[str, Any], partition: int) -> bool:
    """Whether ``event`` is a placement naming its node ``partition``'s owner."""
    return event["event"] in ("cluster_placement", "member_placement") and partition in event.get(
        "owns", []
    )


def _ingest_groups(names: TopicNames, node: str, partitions: int, node_shape: bool) -> list[str]:
    """The consumer group committing each inner partition's ingest on ``node``: one per
    replica (the partition shape), the member's one (the node shape)."""
    if node_shape:
        return [names.node_group(node)] * partitions
    return [names.node_group(f"{node}.p{p}") for p in range(partitions)]


def _wait_ingested(
    broker: KafkaBroker, names: TopicNames, node: str, partitions: int, node_shape: bool
) -> None:
    """Until node ``node`` committed its ingest up to the inner topic's end."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    wanted = {TopicPartition(names.inner, p): latest for p in range(partitions)}
    ends = {tp.partition: f.result().offset for tp, f in admin.list_offsets(wanted).items()}
    groups = _ingest_groups(names, node, partitions, node_shape)
    while True:
        behind = 0
        for p in range(partitions):
            group = groups[p]
            request = [ConsumerGroupTopicPartitions(group, [TopicPartition(names.inner, p)])]
            try:
                result = admin.list_consumer_group_offsets(request)[group].result()
                offset = result.topic_partitions[0].offset
            except Exception:  # not committed yet
                offset = -1
            behind += max(0, ends[p] - max(offset, 0))
        if behind == 0:
            return
        print(f"{node}: {behind} records to ingest", flush=True)
        time.sleep(5)


def _log_bytes(broker: KafkaBroker, topic: str, partition: int) -> int:
    data = broker.data_dir
    if data is None:
        return 0
    return sum(f.stat().st_size for f in (data / f"{topic}-{partition}").glob("*.log"))


def _lateness(
    seen: Collected, partitions: int, keep: set[int], from_ms: int, to_ms: int
) -> list[int]:
    out = []
    for message_id, deliveries in seen.by_id().items():
        if partition_of(message_id.encode(), partitions) not in keep:
            continue
        out += [d.received_ms - d.due_ms for d in deliveries if from_ms <= d.received_ms <= to_ms]
    return out


def _quantiles(values: list[int]) -> dict[str, int]:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": max(values),
    }


def _grow(
    cluster: Cluster,
    tails: dict[str, EventTail],
    broker: KafkaBroker,
    names: TopicNames,
    pending_by_partition: dict[int, int],
    to: int,
    timeout_s: float,
) -> Step:
    """Add nodes until ``to``; wait until every partition they own delivered from them."""
    before = Placement.of(frozenset(cluster.nodes), cluster.partitions, cluster.layout.standbys)
    started: dict[str, int] = {}
    while len(cluster.nodes) < to:
        node = cluster.add()
        started[node.name] = int(time.time() * 1000)
        tails[node.name] = EventTail(node.log_path, _EVENTS)
    after = Placement.of(frozenset(cluster.nodes), cluster.partitions, cluster.layout.standbys)
    step = Step(nodes=to, added=sorted(started))
    moving = {
        p: after.owner(p) for p in range(cluster.partitions) if after.owner(p) != before.owner(p)
    }
    print(f"growing to {to}: partitions {sorted(moving)} move", flush=True)
    deadline = time.monotonic() + timeout_s
    first: dict[int, int] = {}
    while len(first) < len(moving):
        if time.monotonic() > deadline:
            missing = sorted(set(moving) - set(first))
            raise RuntimeError(f"partitions {missing} not delivered by their new owner")
        time.sleep(0.5)
        for p, owner in moving.items():
            if p in first or owner is None:
                continue
            commits = [_epoch_ms(e) for e in tails[owner].read() if _first_commit_of(e, p)]
            commits = [at for at in commits if at >= started.get(owner, 0)]
            if commits:
                first[p] = min(commits)
    step_start = min(started.values())
    step.settled_ms = max(first.values(), default=step_start) - step_start
    for p, owner in sorted(moving.items()):
        assert owner is not None
        events = tails[owner].events
        assigned = min(
            (_epoch_ms(e) for e in events if _placed_owner(e, p)),
            default=started.get(owner, step_start),
        )
        read = 0
        for e in events:
            if e["event"] == "ingest_assigned" and str(p) in e.get("catch_up", {}):
                read = int(e["catch_up"][str(p)]) - int(e.get("resume_at", {}).get(str(p), 0))
        step.moved.append(
            MovedPartition(
                partition=p,
                owner=owner,
                pending=pending_by_partition.get(p, 0),
                records_read=read,
                bytes_on_broker=_log_bytes(broker, names.inner, p),
                from_start_ms=first[p] - started.get(owner, step_start),
                from_assignment_ms=first[p] - assigned,
            )
        )
    for name in step.added:
        mine = [m for m in step.moved if m.owner == name]
        step.cold_pending[name] = sum(m.pending for m in mine)
        step.cold_slowest_ms[name] = max((m.from_assignment_ms for m in mine), default=0)
    return step


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--standbys", type=int, default=1)
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=2000, help="requests per second")
    parser.add_argument("--delay", default="2,6", help="min,max delay of the load, s")
    parser.add_argument("--steps", default="1,2,4", help="node counts, the first at the start")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds between steps")
    parser.add_argument("--cold-bound-s", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--shape",
        choices=["partition", "node"],
        default="partition",
        help="cluster.shape of the nodes (node: one engine per node, issue 61)",
    )
    parser.add_argument("--keep", default=None, help="work directory to keep (logs, stores)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(1))
    steps = [int(n) for n in args.steps.split(",")]
    delay_min, delay_max = (float(x) for x in args.delay.split(","))
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="chronos-scale-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(log_path=workdir / "broker.log").start()
    summary = Summary(scenario="cluster-scale-out", broker="kafka")
    extra = ScaleSummary(pending=args.pending, cold_bound_s=args.cold_bound_s)
    namespace = f"sc{uuid.uuid4().hex[:8]}"
    names = TopicNames(namespace)
    layout = Layout(
        workdir,
        broker.bootstrap,
        namespace,
        args.partitions,
        args.standbys,
        shape=args.shape,
        # What users run: the node shape has one decoder child per node, not per partition.
        decoder="process" if args.shape == "node" else "thread",
    )
    cluster = Cluster(layout)
    tails: dict[str, EventTail] = {}
    try:
        for _ in range(steps[0]):
            node = cluster.add()
            tails[node.name] = EventTail(node.log_path, _EVENTS)
            node.process.wait_ready(120)
        cluster.settled()
        first = next(iter(cluster.nodes.values()))
        settings = load_settings(first.config)
        topic = f"{namespace}-target"
        create_topic(settings, topic, partitions=4)
        began = time.monotonic()
        spec = LoadSpec(
            broker.bootstrap,
            names.inner,
            topic,
            args.pending,
            0,
            delay_min_ms=2 * 3_600_000,
            delay_max_ms=3 * 3_600_000,
            prefix=f"pending-{uuid.uuid4().hex[:6]}",
        )
        extra.preload_s = round(generate(spec)["seconds"], 1)
        pending_by_partition: dict[int, int] = {}
        for i in range(args.pending):
            p = partition_of(f"{spec.prefix}-{i}".encode(), args.partitions)
            pending_by_partition[p] = pending_by_partition.get(p, 0) + 1
        for node in cluster.nodes.values():
            _wait_ingested(broker, names, node.name, args.partitions, layout.node_shape)
        extra.ingested_s = round(time.monotonic() - began, 1)
        print(f"{args.pending} pending ingested in {extra.ingested_s} s", flush=True)
        committed, uncommitted, watchers = Watched.start(broker.bootstrap, topic)
        every = set(range(args.partitions))
        with DelayClient(settings) as client:
            load = Load(client, topic, args.rate, args.seed, delay_s=(delay_min, delay_max))
            load.start()
            try:
                time.sleep(delay_max + args.settle)
                now_ms = int(time.time() * 1000)
                extra.before_lateness_ms = _quantiles(
                    _lateness(committed, args.partitions, every, now_ms - 10_000, now_ms)
                )
                for to in steps[1:]:
                    before = Placement.of(frozenset(cluster.nodes), args.partitions, args.standbys)
                    step_ms = int(time.time() * 1000)
                    step = _grow(
                        cluster, tails, broker, names, pending_by_partition, to, timeout_s=600
                    )
                    settled_ms = step_ms + step.settled_ms
                    unmoved = {p for p in every if before.owner(p) not in step.added} - {
                        m.partition for m in step.moved
                    }
                    time.sleep(3.0)  # deliveries of the window reach the counting consumer
                    step.unmoved_lateness_ms = _quantiles(
                        _lateness(committed, args.partitions, unmoved, step_ms, settled_ms)
                    )
                    extra.steps.append(step)
                    print(json.dumps(asdict(step)), flush=True)
                    time.sleep(args.settle)
            finally:
                load.stop()
        drain(load, watchers)
        verify(load, committed, uncommitted, summary)
        for step in extra.steps:
            for name, pending in step.cold_pending.items():
                if pending and step.cold_slowest_ms[name] > args.cold_bound_s * 1000:
                    extra.cold_within_bound = False
                    summary.problems.append(
                        f"{name} took {step.cold_slowest_ms[name]} ms to deliver its "
                        f"{pending} pending"
                    )
    finally:
        for node in cluster.all():
            try:
                if node.process.running():
                    node.process.terminate()
            except Exception as exc:  # report, go on stopping the others
                print(f"stopping {node.name}: {exc}", file=sys.stderr)
        broker.stop()
    print(f"logs: {workdir}")
    result = {**asdict(summary), **asdict(extra)}
    print(json.dumps(result))
    return 0 if not summary.problems else 1


if __name__ == "__main__":
    sys.exit(main())

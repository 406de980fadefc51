#!/usr/bin/env python3
"""Cluster check: node processes sharing the inner topic's partitions, under load and faults.

The load of ``failover_check.py`` (delays 0-5 s, 10 % cancels, 2 % repeats, 5 % reschedules to
0-20 s ahead, judged against the new due time when acknowledged in time: ``--reschedule``)
runs against ``--nodes`` node processes of one cluster (``--partitions`` inner partitions,
``--standbys`` standbys each) while a scenario hurts them; afterwards a ``read_committed``
consumer must have seen every expected delivery exactly once, none early and no cancelled one.

Scenarios (``--scenario``):

* ``kill``: ``--faults`` times, every ``--interval`` s, kill -9 a node that delivers partitions
  (in turn), wait until each of its partitions committed a delivery transaction in a newer
  term, then restart it on its store. Failover: the kill to each partition's first commit.
* ``leave``: the same with SIGTERM (a graceful leave). Gap: the stop to each partition's first
  commit in a newer term.
* ``broker`` (Apache Kafka only): ``--faults`` times, kill -9 the broker, keep it down 5 s,
  start it again on its data. Per crash: from the broker answering again to each partition's
  first visible delivery after that (``broker_again_ms``, the slowest partition).
* ``churn``: a fault every ``--interval`` s drawn from: kill -9 a node, SIGTERM a node, start
  a new node on an empty disk, remove a node for good, SIGSTOP a node for 10 s; the node
  count stays between 2 and ``--nodes`` + 2.
* ``migrate`` (from ``--shape partition``, ``--release`` to start from a release): the upgrade
  across the two shapes, stop all and start all. After ``--interval`` s of load, SIGTERM every
  node, then start each again on its data directory as a member of the node shape run by this
  tree. Gap: the first stop to each partition's first commit as a member.

Every run reports the longest time no delivery became visible (``longest_gap_ms``), per fault
the longest gap of the partitions it moved within 30 s (``fault_gaps_ms``; for a node started
again, split at its restart: ``leave_gaps_ms`` and ``return_gaps_ms``), takeovers
per partition, and whether two owners of one partition committed in overlapping terms (each
term's first and last commit, from the logs).

``--shape node`` runs members of the node shape (``cluster.shape = "node"``, issue 61): one
engine per node; a partition's takeover is its ``partition_delivering`` event and its first
commit in a term ``lane_first_commit``.

    python scripts/cluster_check.py                             # kill x10, 3 nodes, 8 partitions
    python scripts/cluster_check.py --scenario leave --faults 5
    python scripts/cluster_check.py --scenario broker --faults 3 --rate 1500
    python scripts/cluster_check.py --scenario churn --nodes 4 --partitions 16 --seconds 600
    python scripts/cluster_check.py --scenario migrate --faults 1 --release ../last-release

The last line of output is the JSON summary. Exit code 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from failover_check import Load, Summary, _epoch_ms, drain, log_events, verify

from chronos.devstack.brokers import LocalBroker
from chronos.devstack.check import Watched, add_broker_options, finish, staged
from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.process import NodeProcess
from chronos.devstack.watch import Collected
from chronos.kafka.admin import create_topic
from chronos.kafka.partitioner import partition_of
from chronos.quantiles import percentile
from chronos.settings import load_settings
from proxy.client import DelayClient

CLUSTER = "c"


@dataclass
class ClusterSummary:
    """What the cluster check measured beyond the load's verdict (``failover_check.Summary``)."""

    nodes_started: int = 0
    faults: list[str] = field(default_factory=list)
    #: Per partition whose owner failed or left: the fault to its first commit in a newer term.
    handover_ms: list[int] = field(default_factory=list)
    handover_p50_ms: int = 0
    handover_max_ms: int = 0
    takeovers: int = 0
    overlapping_terms: list[str] = field(default_factory=list)
    #: The longest time any inner partition went without a visible delivery while the load
    #: ran (its deliveries' ids hash to it), and per fault the longest such gap of the
    #: partitions it took from their owner, from the fault on.
    partition_gap_max_ms: int = 0
    fault_gaps_ms: list[int] = field(default_factory=list)
    #: Per fault whose node was started again (kill, leave): that gap split at the restart,
    #: the partitions leaving the node (fault to restart) and coming back to it (restart on).
    leave_gaps_ms: list[int] = field(default_factory=list)
    return_gaps_ms: list[int] = field(default_factory=list)
    #: Per broker crash: from the broker answering again until every partition delivered
    #: visibly again (the slowest partition).
    broker_again_ms: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Layout:
    """What every node of the checked cluster shares.

    Parameters:
        workdir: where its configs, logs and stores go.
        bootstrap: the Kafka.
        namespace: its topics' namespace.
        partitions: the inner topic's partitions.
        standbys: standbys per partition.
        release: an earlier release's checkout the nodes run (None: this tree).
    """

    workdir: Path
    bootstrap: str
    namespace: str
    partitions: int
    standbys: int
    release: Path | None = None
    #: ``cluster.shape``: "partition" (a replica group per partition) or "node".
    shape: str = "partition"
    #: ``node.ingest_decoder``: "thread" here (a decoder child per hosted partition of the
    #: partition shape crowded two cores), "process" to measure what users run.
    decoder: str = "thread"

    @property
    def node_shape(self) -> bool:
        return self.shape == "node"


class ClusterNodeProcess:
    """One cluster node process and what its log says about the partitions it delivers."""

    def __init__(self, name: str, layout: Layout) -> None:
        self.name = name
        workdir = layout.workdir
        self.log_path = workdir / f"{name}.log"
        config = workdir / f"{name}.toml"
        config.write_text(
            f"""[kafka]
bootstrap_servers = "{layout.bootstrap}"
[topics]
namespace = "{layout.namespace}"
inner_partitions = {layout.partitions}
[node]
node_id = "{name}"
data_dir = "{workdir / f"store-{name}"}"
ingest_threads = 1
ingest_decoder = "{layout.decoder}"
[cluster]
name = "{CLUSTER}"
standby_replicas = {layout.standbys}
shape = "{layout.shape}"
[admin]
enabled = false
[log]
format = "json"
"""
        )
        self.config = config
        self.node_shape = layout.node_shape
        started = "cluster_member_started" if layout.node_shape else "cluster_node_started"
        self.process = NodeProcess(
            config, self.log_path, ready_event=started, source=layout.release
        )

    def events(self, *names: str) -> list[dict[str, Any]]:
        return log_events(self.log_path, *names)

    def delivering(self) -> dict[int, int]:
        """Partition -> term of the partitions this run masters now (its last role event)."""
        if not self.process.running():
            return {}
        if self.node_shape:
            return self._lanes()
        state: dict[int, int | None] = {}
        events = ("became_master", "became_backup", "cluster_node_started", "shard_stopping")
        for event in self.events(*events):
            if event["event"] == "cluster_node_started":
                state.clear()
                continue
            if event["event"] == "shard_stopping":
                state[int(event["partition"])] = None
                continue
            partition = _partition(event)
            state[partition] = int(event["term"]) if event["event"] == "became_master" else None
        return {p: t for p, t in state.items() if t is not None}

    def _lanes(self) -> dict[int, int]:
        """A member of the node shape: partition -> term of the lanes it delivers now."""
        state: dict[int, int | None] = {}
        events = (
            "partition_delivering",
            "master_released",
            "member_delivery_fenced",
            "cluster_member_started",
        )
        for event in self.events(*events):
            name = event["event"]
            if name == "cluster_member_started":
                state.clear()
            elif name == "member_delivery_fenced":
                for partition in event.get("partitions", []):
                    state[int(partition)] = None
            elif name == "master_released":
                state[int(event["partition"])] = None
            else:
                state[int(event["partition"])] = int(event["term"])
        return {p: t for p, t in state.items() if t is not None}

    @property
    def first_commit_event(self) -> str:
        return "lane_first_commit" if self.node_shape else "master_first_commit"

    @property
    def takeover_event(self) -> str:
        return "partition_delivering" if self.node_shape else "became_master"


def _partition(event: dict[str, Any]) -> int:
    """The partition of a replica's event (its node id is ``<node>.p<partition>``), or of a
    member's lane (its ``partition``)."""
    if "partition" in event:
        return int(event["partition"])
    return int(str(event["node"]).rsplit(".p", 1)[1])


class Cluster:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.partitions = layout.partitions
        self.nodes: dict[str, ClusterNodeProcess] = {}
        self.retired: list[ClusterNodeProcess] = []
        self._next = 0

    def add(self) -> ClusterNodeProcess:
        name = f"n{self._next}"
        self._next += 1
        node = ClusterNodeProcess(name, self.layout)
        node.process.start()
        self.nodes[name] = node
        return node

    def all(self) -> list[ClusterNodeProcess]:
        return [*self.nodes.values(), *self.retired]

    def first_commits(self, partition: int, above_term: int, since_ms: int) -> list[int]:
        """Epoch ms of every first commit of ``partition`` in a term above ``above_term``
        from ``since_ms`` on (a node's last role event can lag a fencing it did not log yet)."""
        return [
            at
            for node in self.all()
            for event in node.events(node.first_commit_event)
            if _partition(event) == partition
            and int(event["term"]) > above_term
            and (at := _epoch_ms(event)) >= since_ms
        ]

    def wait_moved(self, lost: dict[int, int], since_ms: int, timeout_s: float = 120) -> list[int]:
        """For each partition of ``lost`` (partition -> term), ms from ``since_ms`` until a
        commit in a newer term."""
        deadline = time.monotonic() + timeout_s
        found: dict[int, int] = {}
        while time.monotonic() < deadline and len(found) < len(lost):
            for partition, term in lost.items():
                if partition not in found:
                    commits = self.first_commits(partition, term, since_ms)
                    if commits:
                        found[partition] = min(commits) - since_ms
            time.sleep(0.1)
        missing = sorted(set(lost) - set(found))
        if missing:
            raise RuntimeError(f"partitions {missing} delivered no newer term in {timeout_s} s")
        return list(found.values())

    def settled(self, timeout_s: float = 120) -> None:
        """Wait until every partition has exactly one master."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            counts = {p: 0 for p in range(self.partitions)}
            for node in self.nodes.values():
                for partition in node.delivering():
                    counts[partition] += 1
            if all(c == 1 for c in counts.values()):
                return
            time.sleep(0.2)
        raise RuntimeError(f"partitions without exactly one master after {timeout_s} s: {counts}")


def _delivering_node(cluster: Cluster, turn: int) -> ClusterNodeProcess:
    owners = [n for n in cluster.nodes.values() if n.delivering()]
    return owners[turn % len(owners)]


@dataclass
class Fault:
    """One fault: when (epoch ms), the partitions it took from an owner, and when their node
    was started again (None: it was not)."""

    at_ms: int
    lost: list[int]
    restarted_ms: int | None = None


def _fault(kind: str, cluster: Cluster, summary: ClusterSummary, turn: int) -> Fault:
    """One fault; waits until the partitions it took from an owner deliver again."""
    now_ms = int(time.time() * 1000)
    if kind == "add":
        node = cluster.add()
        summary.nodes_started += 1
        summary.faults.append(f"add {node.name}")
        print(f"started {node.name} on an empty disk")
        return Fault(now_ms, [])
    node = _delivering_node(cluster, turn)
    lost = node.delivering()
    summary.faults.append(f"{kind} {node.name} {sorted(lost)}")
    if kind == "kill":
        node.process.kill()
    elif kind in ("leave", "remove"):
        node.process.terminate()
    elif kind == "freeze":
        node.process.signal(signal.SIGSTOP)
    moved = cluster.wait_moved(lost, now_ms)
    summary.handover_ms += moved
    print(f"{kind} {node.name}: partitions {sorted(lost)} again after {sorted(moved)} ms")
    if kind == "freeze":
        remaining = 10.0 - (time.time() * 1000 - now_ms) / 1000
        time.sleep(max(0.0, remaining))
        node.process.signal(signal.SIGCONT)
    elif kind == "remove":
        del cluster.nodes[node.name]
        cluster.retired.append(node)
    else:
        restarted_ms = int(time.time() * 1000)
        node.process.start()
        return Fault(now_ms, sorted(lost), restarted_ms)
    return Fault(now_ms, sorted(lost))


def _migrate(cluster: Cluster, summary: ClusterSummary) -> Fault:
    """Stop every node (SIGTERM), then start each again on its data directory as a member of
    the node shape, run by this tree; waits until each partition delivered as a member."""
    now_ms = int(time.time() * 1000)
    lost: dict[int, int] = {}
    for node in cluster.nodes.values():
        lost.update(node.delivering())
    for node in cluster.nodes.values():  # all at once, as an operator stops a cluster
        node.process.signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    while any(n.process.running() for n in cluster.nodes.values()):
        if time.monotonic() > deadline:
            raise RuntimeError("the partition shape's nodes did not stop within 60 s")
        time.sleep(0.1)
    summary.faults.append(f"migrate {sorted(cluster.nodes)}")
    cluster.layout = replace(cluster.layout, shape="node", release=None)
    # The same names: the same data directories and logs (a member's events start after its
    # ``cluster_member_started``).
    cluster.nodes = {name: ClusterNodeProcess(name, cluster.layout) for name in cluster.nodes}
    for node in cluster.nodes.values():
        node.process.start()
    moved = cluster.wait_moved(lost, now_ms)
    summary.handover_ms += moved
    print(f"migrated: partitions {sorted(lost)} delivering as members after {sorted(moved)} ms")
    return Fault(now_ms, sorted(lost))


def _worst_gap(
    gaps: dict[int, list[tuple[int, int]]], partitions: list[int], from_ms: int, to_ms: int
) -> int:
    """The longest gap of ``partitions`` that overlaps ``from_ms``..``to_ms``."""
    return max(
        (
            length
            for p in partitions
            for start, length in gaps[p]
            if start + length >= from_ms and start <= to_ms
        ),
        default=0,
    )


#: How long after a fault its partitions' gaps count as its own.
_FAULT_WINDOW_MS = 30_000
#: How long the broker scenario keeps the broker dead.
_BROKER_DOWN_S = 5.0


def _broker_crash(broker: LocalBroker | None, summary: ClusterSummary) -> int:
    """kill -9 the broker, restart it on its data; returns when it answered (epoch ms)."""
    if not isinstance(broker, KafkaBroker):
        raise SystemExit("--scenario broker needs --broker kafka (and no --bootstrap)")
    broker.crash()
    summary.faults.append("broker")
    time.sleep(_BROKER_DOWN_S)
    broker.restart(timeout_s=120)
    answered_ms = int(time.time() * 1000)
    print(f"broker crashed, answering again at {answered_ms}")
    return answered_ms


def _again_after(answered_ms: int, seen: Collected, partitions: int) -> int:
    """ms from ``answered_ms`` until every partition had a visible delivery after it."""
    first: dict[int, int] = {}
    for message_id, deliveries in seen.by_id().items():
        partition = partition_of(message_id.encode(), partitions)
        for d in deliveries:
            if d.received_ms >= answered_ms:
                first[partition] = min(first.get(partition, d.received_ms), d.received_ms)
    if len(first) < partitions:
        return -1  # a partition never delivered again: reported as a problem
    return max(first.values()) - answered_ms


def _partition_gaps(
    load: Load, seen: Collected, partitions: int
) -> dict[int, list[tuple[int, int]]]:
    """Per inner partition, (start epoch ms, length ms) of each gap between two visible
    deliveries of its messages while the load ran, from a second after its longest delay."""
    begin = load.started_ms + int(load.delay_s[1] * 1000) + 1000
    times: dict[int, list[int]] = {p: [begin, load.stopped_ms] for p in range(partitions)}
    for message_id, deliveries in seen.by_id().items():
        partition = partition_of(message_id.encode(), partitions)
        times[partition] += [
            d.received_ms for d in deliveries if begin <= d.received_ms <= load.stopped_ms
        ]
    gaps: dict[int, list[tuple[int, int]]] = {}
    for partition, points in times.items():
        points.sort()
        gaps[partition] = [(a, b - a) for a, b in zip(points, points[1:], strict=False)]
    return gaps


def _write_deliveries(path: Path, seen: Collected, partitions: int) -> None:
    """Every visible delivery, one JSON line each, for a look after the run (duplicates, which
    inner partition was late when)."""
    with path.open("w") as out:
        for message_id, deliveries in seen.by_id().items():
            inner = partition_of(message_id.encode(), partitions)
            for d in deliveries:
                row = {
                    "id": message_id,
                    "inner": inner,
                    "occurrence": d.occurrence,
                    "due_ms": d.due_ms,
                    "produced_ms": d.produced_ms,
                    "received_ms": d.received_ms,
                    "target": d.partition,
                    "offset": d.offset,
                }
                out.write(json.dumps(row) + "\n")


def _churn_kind(cluster: Cluster, rng: random.Random, most: int) -> str:
    kinds = ["kill", "leave", "freeze"]
    if len(cluster.nodes) < most:
        kinds.append("add")
    if len(cluster.nodes) > 2:
        kinds.append("remove")
    return rng.choice(kinds)


def _overlaps(cluster: Cluster) -> list[str]:
    """Terms of one partition that two nodes committed in (fencing allows one)."""
    spans: dict[tuple[int, int], list[tuple[int, int, str]]] = {}
    for node in cluster.all():
        terms: dict[tuple[int, int], list[int]] = {}
        for event in node.events(node.first_commit_event):
            key = (_partition(event), int(event["term"]))
            terms.setdefault(key, []).append(_epoch_ms(event))
        for key, times in terms.items():
            spans.setdefault(key, []).append((min(times), max(times), node.name))
    found = []
    for (partition, term), owners in sorted(spans.items()):
        if len({name for _, _, name in owners}) > 1:
            found.append(f"p{partition} term {term}: {sorted(n for _, _, n in owners)}")
    return found[:20]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenario", choices=["kill", "leave", "broker", "churn", "migrate"], default="kill"
    )
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--standbys", type=int, default=1)
    parser.add_argument(
        "--shape",
        choices=["partition", "node"],
        default="partition",
        help="cluster.shape of the nodes (node: one engine per node, issue 61)",
    )
    parser.add_argument("--faults", type=int, default=10, help="kill, leave: how many")
    parser.add_argument("--seconds", type=float, default=600.0, help="churn: how long")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between faults")
    parser.add_argument("--rate", type=int, default=2000, help="requests per second")
    parser.add_argument(
        "--reschedule", type=float, default=0.05, help="share of one-shots rescheduled"
    )
    add_broker_options(parser)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--release",
        type=Path,
        default=None,
        help="an earlier release's checkout the nodes run (its code, this environment's "
        "dependencies): the same check before a change",
    )
    args = parser.parse_args()
    if args.scenario == "migrate" and args.shape != "partition":
        parser.error("--scenario migrate starts from --shape partition")
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(1))
    with staged(args, "cluster") as stage:
        workdir, bootstrap, broker = stage.workdir, stage.bootstrap, stage.broker
        summary = Summary(scenario=f"cluster-{args.scenario}", broker=stage.broker_name)
        extra = ClusterSummary()
        namespace = f"cl{uuid.uuid4().hex[:8]}"
        release = args.release.resolve() if args.release else None
        cluster = Cluster(
            Layout(
                workdir, bootstrap, namespace, args.partitions, args.standbys, release, args.shape
            )
        )
        rng = random.Random(args.seed)
        faults: list[Fault] = []
        broker_answers: list[int] = []
        try:
            first = cluster.add()
            first.process.wait_ready(120)
            cluster.settled()
            for _ in range(args.nodes - 1):
                cluster.add().process.wait_ready(120)
            cluster.settled()
            settings = load_settings(first.config)
            topic = f"{namespace}-target"
            create_topic(settings, topic, partitions=4)
            committed, uncommitted, watchers = Watched.start(bootstrap, topic)
            with DelayClient(settings) as client:
                load = Load(client, topic, args.rate, args.seed, reschedule_share=args.reschedule)
                load.start()
                try:
                    started = time.monotonic()
                    turn = 0
                    while True:
                        if args.scenario == "churn":
                            if time.monotonic() - started >= args.seconds:
                                break
                            kind = _churn_kind(cluster, rng, args.nodes + 2)
                        elif turn >= args.faults:
                            break
                        else:
                            kind = args.scenario
                        time.sleep(args.interval)
                        if kind == "broker":
                            broker_answers.append(_broker_crash(broker, extra))
                        elif kind == "migrate":
                            faults.append(_migrate(cluster, extra))
                        else:
                            faults.append(_fault(kind, cluster, extra, turn))
                        turn += 1
                    time.sleep(args.interval)
                finally:
                    load.stop()
            drain(load, watchers)
            verify(load, committed, uncommitted, summary)
            _write_deliveries(workdir / "deliveries.jsonl", committed, args.partitions)
            gaps = _partition_gaps(load, committed, args.partitions)
            extra.partition_gap_max_ms = max(
                (length for found in gaps.values() for _, length in found), default=0
            )
            for fault in faults:
                extra.fault_gaps_ms.append(
                    _worst_gap(gaps, fault.lost, fault.at_ms, fault.at_ms + _FAULT_WINDOW_MS)
                )
                if fault.restarted_ms is not None:
                    back = fault.restarted_ms
                    extra.leave_gaps_ms.append(_worst_gap(gaps, fault.lost, fault.at_ms, back))
                    extra.return_gaps_ms.append(
                        _worst_gap(gaps, fault.lost, back, fault.at_ms + _FAULT_WINDOW_MS)
                    )
            extra.broker_again_ms = [
                _again_after(at, committed, args.partitions) for at in broker_answers
            ]
            if any(ms < 0 for ms in extra.broker_again_ms):
                summary.problems.append("a partition delivered nothing after a broker crash")
            extra.takeovers = sum(len(n.events(n.takeover_event)) for n in cluster.all())
            extra.overlapping_terms = _overlaps(cluster)
            if extra.overlapping_terms:
                summary.problems.append("two owners committed one partition in one term")
            if extra.handover_ms:
                extra.handover_p50_ms = percentile(extra.handover_ms, 0.5)
                extra.handover_max_ms = max(extra.handover_ms)
        finally:
            for node in cluster.all():
                try:
                    if node.process.running():
                        node.process.signal(signal.SIGCONT)
                        node.process.terminate()
                except Exception as exc:
                    print(f"stopping {node.name}: {exc}")
    return finish(asdict(summary) | asdict(extra) | {"ok": summary.ok}, stage.workdir)


if __name__ == "__main__":
    sys.exit(main())

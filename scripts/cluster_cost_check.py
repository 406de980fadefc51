#!/usr/bin/env python3
"""What a cluster costs at rest: broker and node CPU with nothing to deliver, per partition count.

For each of ``--partitions`` (a fresh namespace each, on one broker): start ``--nodes`` node
processes of one cluster (``--standbys`` standbys each), wait until every partition has one
master and every node has run ``--settle`` s, then, for ``--seconds``, read the CPU (user +
system, from /proc) of the broker and of each node with its decoder processes, and count the
ownership events the nodes log meanwhile. A cluster at rest should neither fence nor move
anything (issue 61's acceptance 3), and its cost should not follow its partitions
(acceptance 1: the 64-partition figures at most 1.5× the 1-partition ones).

    python scripts/cluster_cost_check.py --partitions 1 4 16 64
    python scripts/cluster_cost_check.py --partitions 1 4 16 64 --shape node

The last line of output is the JSON summary (``layouts``: one row per partition count). Exit
code 0 when no layout fenced or moved anything at rest, 1 otherwise; the cost ratio is reported,
not judged (today's per-partition cluster is the baseline issue 61 replaces).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cluster_check import Cluster, Layout

from chronos.bench.sampler import cpu_seconds
from chronos.devstack.check import add_broker_options, finish, staged

SETTLE_TIMEOUT_S = 300.0

#: Events that say a partition's delivery changed hands or was fenced (the node shape's: a
#: claim decided, a lane started or handed over, a member's loop fenced).
OWNERSHIP_EVENTS = (
    "became_master",
    "master_fenced",
    "takeover_started",
    "shard_stopping",
    "claim_decided",
    "partition_delivering",
    "master_released",
    "member_delivery_fenced",
)


@dataclass
class RestRow:
    """One layout's figures over the measured window."""

    partitions: int
    nodes: int
    standbys: int
    #: From the first node's start until every partition had one master (None: not within
    #: ``SETTLE_TIMEOUT_S``; the window is then measured all the same, while it churns).
    settled_s: float | None
    broker_core_share: float
    node_core_shares: dict[str, float]
    nodes_core_share: float
    ownership_events: dict[str, int]


@dataclass
class RestSummary:
    broker: str
    seconds: float
    layouts: list[RestRow] = field(default_factory=list)
    #: The highest partition count's broker and nodes' CPU over the lowest's.
    broker_ratio: float = 0.0
    nodes_ratio: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _counts(cluster: Cluster) -> dict[str, int]:
    return {
        name: sum(len(node.events(name)) for node in cluster.all()) for name in OWNERSHIP_EVENTS
    }


def _measure(
    layout: Layout, nodes: int, settle_s: float, seconds: float, broker_pid: int | None
) -> RestRow:
    cluster = Cluster(layout)
    started = time.monotonic()
    try:
        for _ in range(nodes):
            cluster.add().process.wait_ready(300)
        settled_s: float | None = None
        try:
            cluster.settled(timeout_s=SETTLE_TIMEOUT_S)
            settled_s = round(time.monotonic() - started, 1)
        except RuntimeError as exc:  # measured all the same: what it costs while it churns
            print(f"{layout.partitions} partitions: {exc}", flush=True)
        time.sleep(settle_s)
        before = _counts(cluster)
        pids = {node.name: node.process.pid for node in cluster.nodes.values()}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        broker_before = cpu_seconds(broker_pid) if broker_pid else 0.0
        window_start = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - window_start
        shares = {
            name: round((cpu_seconds(pid) - cpu_before[name]) / elapsed, 3)
            for name, pid in pids.items()
        }
        broker_share = (cpu_seconds(broker_pid) - broker_before) / elapsed if broker_pid else 0.0
        after = _counts(cluster)
        return RestRow(
            partitions=layout.partitions,
            nodes=nodes,
            standbys=layout.standbys,
            settled_s=settled_s,
            broker_core_share=round(broker_share, 3),
            node_core_shares=shares,
            nodes_core_share=round(sum(shares.values()), 3),
            ownership_events={name: after[name] - before[name] for name in OWNERSHIP_EVENTS},
        )
    finally:
        for node in cluster.all():
            if node.process.running():
                node.process.signal(signal.SIGCONT)
                try:
                    node.process.terminate()
                except subprocess.TimeoutExpired:  # an overloaded node: do not leave it running
                    node.process.kill()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--standbys", type=int, default=1)
    parser.add_argument(
        "--shape",
        choices=["partition", "node"],
        default="partition",
        help="cluster.shape of the nodes (node: one engine per node, issue 61)",
    )
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after settling")
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    parser.add_argument(
        "--broker-pid",
        type=int,
        help="the process of the broker --bootstrap names, to count its CPU (a long-lived "
        "broker past its JIT warm-up: a broker this script starts compiles during the first "
        "layout measured)",
    )
    add_broker_options(parser)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(1))
    with staged(args, "cluster-cost") as stage:
        summary = RestSummary(broker=stage.broker_name, seconds=args.seconds)
        broker_pid = stage.broker.pid if stage.broker is not None else args.broker_pid
        for partitions in args.partitions:
            layout = Layout(
                Path(stage.workdir / f"p{partitions}"),
                stage.bootstrap,
                f"cost{uuid.uuid4().hex[:8]}",
                partitions,
                args.standbys,
                shape=args.shape,
            )
            layout.workdir.mkdir(parents=True, exist_ok=True)
            row = _measure(layout, args.nodes, args.settle, args.seconds, broker_pid)
            print(asdict(row), flush=True)
            summary.layouts.append(row)
            moved = {name: n for name, n in row.ownership_events.items() if n}
            if row.settled_s is None:
                summary.problems.append(f"{partitions} partitions: not settled in 300 s")
            if moved:
                summary.problems.append(f"{partitions} partitions at rest: {moved}")
        low, high = summary.layouts[0], summary.layouts[-1]
        if low.broker_core_share:
            summary.broker_ratio = round(high.broker_core_share / low.broker_core_share, 2)
        if low.nodes_core_share:
            summary.nodes_ratio = round(high.nodes_core_share / low.nodes_core_share, 2)
    return finish(asdict(summary) | {"ok": summary.ok}, stage.workdir)


if __name__ == "__main__":
    sys.exit(main())

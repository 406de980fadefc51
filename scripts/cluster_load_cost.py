#!/usr/bin/env python3
"""What delivery costs under load, per layout, as ratios: issue 61's acceptance 2.

For each of ``--layouts`` (a fresh namespace each, on one broker), in one run:

* ``alone``: a node alone over a 1-partition inner topic;
* ``group``: a replica group of two (4 inner partitions), the p99 the clusters are held to;
* ``node1x16``, ``node2x16``, ``node4x16``: 1, 2 and 4 members of the node shape
  (``cluster.shape = "node"``) over 16 inner partitions, 1 standby each (none with one node);
* ``node1x1``: one member over one inner partition: the same engine, transactions included,
  with one partition, so that ``node1x16`` against it says what the partitions themselves cost;
* ``node2x16s0``: 2 members over 16 partitions with no standby, so that ``node2x16`` against
  it says what the standby costs.

Each runs the failover check's load (``failover_check.Load``: delays 0 to ``--delay-max`` s,
10 % cancels, 2 % repeats, ``--reschedule`` rescheduled) at ``--rate`` requests/s: ``--warmup``
s first, then a ``--seconds`` window in which it reads the CPU (user + system, /proc) of the
broker and of every node process with its decoder children, and counts the deliveries a
``read_committed`` consumer saw become visible. Then the load stops, what is still due is
drained and every delivery checked (lost, duplicates, early, cancelled delivered).

Per layout: CPU (broker + nodes) per delivered message in µs, and against ``alone``'s (the
acceptance: one node with 16 partitions at most 1.1×, the clusters at most 1.6×) and, when
``node1x1`` ran, against a member of one partition; the
``read_committed`` lateness p50/p99 over the window against the group's (at most the
group's). The standby's share is not split out per process (every member both owns and
follows): ``node2x16`` against ``node2x16s0`` says it.

    python scripts/cluster_load_cost.py                          # every layout, 2,000 req/s
    python scripts/cluster_load_cost.py --layouts alone node1x16 --rate 1000

The load generator and the consumers run in this process and are not counted. On two cores a
rate the layouts cannot all hold makes the ratios say little: read ``delivered_per_s`` beside
them. The last line of output is the JSON summary; exit code 0 when every layout delivered
exactly what it should (the ratios are reported, not judged).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster_check import Cluster, Layout
from failover_check import Load, Summary, drain, verify

from chronos.bench.sampler import cpu_seconds
from chronos.devstack.check import Watched, add_broker_options, finish, staged
from chronos.devstack.process import NodeProcess
from chronos.kafka.admin import create_topic
from chronos.quantiles import percentile
from chronos.settings import load_settings
from proxy.client import DelayClient

LAYOUTS = ("alone", "group", "node1x1", "node1x16", "node2x16", "node2x16s0", "node4x16")

#: How long a layout may take from its first start until every partition delivers.
READY_TIMEOUT_S = 180.0


@dataclass
class LoadRow:
    """One layout's figures over the measured window."""

    layout: str
    nodes: int
    partitions: int
    requests_per_s: int
    delivered_per_s: float
    broker_core_share: float
    nodes_core_share: float
    #: (broker + nodes) CPU µs per message delivered in the window, and each part alone.
    cpu_us_per_message: float
    broker_us_per_message: float
    nodes_us_per_message: float
    #: Against the node alone's (``alone``), when it ran.
    cpu_ratio_to_alone: float | None
    #: Against one member of one partition's (``node1x1``), when it ran: what the partition
    #: count costs apart from the transactions that every member pays.
    cpu_ratio_to_one_partition: float | None
    lateness_p50_ms: int
    lateness_p99_ms: int
    #: p99 against the replica group's (``group``), when it ran.
    p99_ratio_to_group: float | None
    lost: int
    duplicates: int
    early: int
    cancelled_delivered: int


@dataclass
class LoadSummary:
    broker: str
    rate: int
    seconds: float
    layouts: list[LoadRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class Processes:
    """A layout's node processes: what ``_measure`` starts, samples and stops."""

    def __init__(self, processes: list[NodeProcess], config: Path) -> None:
        self.processes = processes
        self.config = config

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.running()]

    def stop(self) -> None:
        for process in self.processes:
            if process.running():
                try:
                    process.terminate()
                except Exception:  # an overloaded node: do not leave it running
                    process.kill()


def _node_config(
    workdir: Path,
    name: str,
    bootstrap: str,
    namespace: str,
    partitions: int,
    decoder: str,
    group: str | None,
) -> Path:
    config = workdir / f"{name}.toml"
    group_section = f'[group]\nname = "{group}"\n' if group else ""
    config.write_text(
        f"""[kafka]
bootstrap_servers = "{bootstrap}"
[topics]
namespace = "{namespace}"
inner_partitions = {partitions}
[node]
node_id = "{name}"
data_dir = "{workdir / f"store-{name}"}"
ingest_threads = 1
ingest_decoder = "{decoder}"
{group_section}[admin]
enabled = false
[log]
format = "json"
"""
    )
    return config


def _start(
    layout: str, workdir: Path, bootstrap: str, namespace: str, decoder: str
) -> tuple[Processes, int, int]:
    """Start ``layout``; returns its processes, node count and inner partitions once every
    partition has a deliverer."""
    if layout in ("alone", "group"):
        replicas = 1 if layout == "alone" else 2
        partitions = 1 if layout == "alone" else 4
        group = None if layout == "alone" else "g"
        processes, configs = [], []
        for n in range(replicas):
            config = _node_config(
                workdir, f"r{n}", bootstrap, namespace, partitions, decoder, group
            )
            process = NodeProcess(config, workdir / f"r{n}.log", ready_event="ingest_caught_up")
            process.start()
            process.wait_ready(READY_TIMEOUT_S)
            processes.append(process)
            configs.append(config)
        return Processes(processes, configs[0]), replicas, partitions
    shape, _, standbys = layout.partition("s")
    nodes = int(shape.removeprefix("node").split("x")[0])
    partitions = int(shape.split("x")[1])
    cluster = Cluster(
        Layout(
            workdir,
            bootstrap,
            namespace,
            partitions,
            standbys=int(standbys) if standbys else min(1, nodes - 1),
            shape="node",
            decoder=decoder,
        )
    )
    for _ in range(nodes):
        cluster.add().process.wait_ready(READY_TIMEOUT_S)
    cluster.settled(timeout_s=READY_TIMEOUT_S)
    members = [node.process for node in cluster.nodes.values()]
    return Processes(members, next(iter(cluster.nodes.values())).config), nodes, partitions


def _measure(
    layout: str,
    workdir: Path,
    bootstrap: str,
    broker_pid: int | None,
    args: argparse.Namespace,
) -> tuple[LoadRow, Summary]:
    namespace = f"lc{uuid.uuid4().hex[:8]}"
    workdir.mkdir(parents=True, exist_ok=True)
    processes, nodes, partitions = _start(layout, workdir, bootstrap, namespace, args.decoder)
    summary = Summary(scenario=f"load-cost-{layout}", broker="")
    try:
        settings = load_settings(processes.config)
        topic = f"{namespace}-target"
        create_topic(settings, topic, partitions=4)
        committed, uncommitted, watchers = Watched.start(bootstrap, topic)
        with DelayClient(settings) as client:
            load = Load(
                client,
                topic,
                args.rate,
                args.seed,
                delay_s=(0.0, args.delay_max),
                reschedule_share=args.reschedule,
            )
            load.start()
            try:
                time.sleep(args.warmup)
                pids = processes.pids()
                nodes_before = sum(cpu_seconds(pid) for pid in pids)
                broker_before = cpu_seconds(broker_pid) if broker_pid else 0.0
                window_ms = int(time.time() * 1000)
                started = time.monotonic()
                time.sleep(args.seconds)
                elapsed = time.monotonic() - started
                nodes_cpu = sum(cpu_seconds(pid) for pid in pids) - nodes_before
                broker_cpu = (cpu_seconds(broker_pid) - broker_before) if broker_pid else 0.0
                window_end_ms = window_ms + int(elapsed * 1000)
            finally:
                load.stop()
        drain(load, watchers)
        verify(load, committed, uncommitted, summary)
        in_window = [d for d in committed.every() if window_ms <= d.received_ms < window_end_ms]
        lateness = [d.received_ms - d.due_ms for d in in_window]
        delivered = max(1, len(in_window))
        row = LoadRow(
            layout=layout,
            nodes=nodes,
            partitions=partitions,
            requests_per_s=summary.requests_per_s,
            delivered_per_s=round(len(in_window) / elapsed, 1),
            broker_core_share=round(broker_cpu / elapsed, 3),
            nodes_core_share=round(nodes_cpu / elapsed, 3),
            cpu_us_per_message=round((broker_cpu + nodes_cpu) / delivered * 1e6, 1),
            broker_us_per_message=round(broker_cpu / delivered * 1e6, 1),
            nodes_us_per_message=round(nodes_cpu / delivered * 1e6, 1),
            cpu_ratio_to_alone=None,
            cpu_ratio_to_one_partition=None,
            lateness_p50_ms=percentile(lateness, 0.5),
            lateness_p99_ms=percentile(lateness, 0.99),
            p99_ratio_to_group=None,
            lost=summary.lost,
            duplicates=summary.duplicates,
            early=summary.early,
            cancelled_delivered=summary.cancelled_delivered,
        )
        return row, summary
    finally:
        processes.stop()


def _ratios(rows: list[LoadRow]) -> None:
    by_name = {row.layout: row for row in rows}
    alone, group = by_name.get("alone"), by_name.get("group")
    one_partition = by_name.get("node1x1")
    for row in rows:
        if alone is not None and alone.cpu_us_per_message:
            row.cpu_ratio_to_alone = round(row.cpu_us_per_message / alone.cpu_us_per_message, 2)
        if one_partition is not None and one_partition.cpu_us_per_message:
            row.cpu_ratio_to_one_partition = round(
                row.cpu_us_per_message / one_partition.cpu_us_per_message, 2
            )
        if group is not None and group.lateness_p99_ms:
            row.p99_ratio_to_group = round(row.lateness_p99_ms / group.lateness_p99_ms, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--rate", type=int, default=2000, help="requests per second")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before the window")
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    parser.add_argument("--delay-max", type=float, default=5.0, help="longest delay, s")
    parser.add_argument(
        "--reschedule", type=float, default=0.02, help="share of one-shots rescheduled"
    )
    parser.add_argument(
        "--decoder",
        choices=["process", "thread"],
        default="process",
        help="node.ingest_decoder of every node (the default: a decoder child each)",
    )
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--broker-pid",
        type=int,
        help="the process of the broker --bootstrap names, to count its CPU (a long-lived "
        "broker past its JIT warm-up; without it only a broker this script starts is counted)",
    )
    add_broker_options(parser)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(1))
    with staged(args, "load-cost") as stage:
        result = LoadSummary(broker=stage.broker_name, rate=args.rate, seconds=args.seconds)
        broker_pid = stage.broker.pid if stage.broker is not None else args.broker_pid
        for layout in args.layouts:
            row, checked = _measure(
                layout, stage.workdir / layout, stage.bootstrap, broker_pid, args
            )
            print(asdict(row), flush=True)
            result.layouts.append(row)
            wrong: dict[str, Any] = {
                name: getattr(checked, name)
                for name in ("lost", "duplicates", "early", "cancelled_delivered")
                if getattr(checked, name)
            }
            if wrong:
                result.problems.append(f"{layout}: {wrong}")
        _ratios(result.layouts)
    return finish(asdict(result) | {"ok": result.ok}, stage.workdir)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The steady scenario against nodes that split the inner topic (``node.owned_partitions``).

Starts a local Tansu broker and --nodes node processes; the inner topic gets
--nodes x --partitions-per-node partitions, each node owns its own share with its own store.
Then the benchmark's steady scenario runs once (load generator and observer as in
`chronos bench`), and it prints the lateness, each node's CPU (with its decoder child, % of one
core), the other processes' CPU and how busy the whole machine was, each a mean over the whole
scenario: the load, then the wait for its last deliveries (up to 10 s more). `--nodes 1` is
the same load against one node owning every partition: run both, alternated, to compare.

    python scripts/multi_node_steady.py --rate 37500 --nodes 2
    python scripts/multi_node_steady.py --rate 37500 --nodes 1 --partitions-per-node 2
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import ExitStack
from pathlib import Path

from chronos.bench.sampler import ProcessSampler
from chronos.bench.scenarios import steady
from chronos.bench.stack import BenchStack, TopicLayout
from chronos.devstack.process import NodeProcess


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat.

    The first eight fields only (guest time is already in user time); idle, iowait and steal
    (time the hypervisor gave to others) are not busy.
    """
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return user + nice + system + irq + softirq, sum(fields)


def _node_config(stack: BenchStack, index: int, owned: list[int]) -> Path:
    """A config file for one more node beside the stack's own: same broker and topics."""
    path = stack.workdir / f"chronos-{index}.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{stack.bootstrap}"\n'
        f'[topics]\nnamespace = "{stack.namespace}"\ninner_partitions = {stack.layout.inner}\n'
        f'[node]\nnode_id = "bench-node-{index}"\n'
        f'data_dir = "{stack.workdir / f"store-{index}"}"\nowned_partitions = {owned}\n'
        '[log]\nformat = "json"\n'
    )
    return path


def run(rate: float, seconds: float, nodes: int, per_node: int) -> dict[str, object]:
    shares = [list(range(i * per_node, (i + 1) * per_node)) for i in range(nodes)]
    layout = TopicLayout(inner=nodes * per_node, target=8)
    with (
        BenchStack(
            bootstrap=None, node_settings=f"owned_partitions = {shares[0]}", layout=layout
        ) as stack,
        ExitStack() as more,
    ):
        others = [
            NodeProcess(_node_config(stack, i, shares[i]), stack.workdir / f"node-{i}.log")
            for i in range(1, nodes)
        ]
        stack.start_node()
        for node in others:
            node.start()
            more.callback(node.terminate)
        for node in others:
            if not node.wait_ready(120):
                raise RuntimeError(f"a node did not start, see {stack.workdir}")
        pids = [stack.node.pid, *(node.pid for node in others)]
        with ExitStack() as sampling:  # the window ends with the run, not with the teardown
            samplers = [sampling.enter_context(ProcessSampler(pid)) for pid in pids]
            busy_before = _busy_jiffies()
            result = steady(stack, rate, seconds)
            busy_after = _busy_jiffies()
        node_cpu = [sampler.summary()["cpu_percent_mean"] for sampler in samplers]
    busy = busy_after[0] - busy_before[0]
    total = max(busy_after[1] - busy_before[1], 1)
    return {
        "rate": rate,
        "seconds": seconds,
        "nodes": nodes,
        "inner_partitions": layout.inner,
        "sustained": result["sustained"],
        "ingest_rate": round(result["ingest_rate"]),
        "missing": result["missing"],
        "lateness_ms": result["lateness_ms"],
        "node_cpu_percent": node_cpu,
        "other_cpu_percent": {
            k: v for k, v in result["node"]["machine_cpu_percent"].items() if k != "node"
        },
        # % of one core, like the others: 200 % is the whole of a 2-core machine.
        "machine_busy_percent": round(100 * (os.cpu_count() or 1) * busy / total, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=37_500.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--partitions-per-node", type=int, default=1)
    args = parser.parse_args()
    if args.nodes < 1 or args.partitions_per_node < 1:
        parser.error("--nodes and --partitions-per-node must be at least 1")
    print(json.dumps(run(args.rate, args.seconds, args.nodes, args.partitions_per_node)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

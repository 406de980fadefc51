#!/usr/bin/env python3
"""Cancels against a burst: does a cancel Kafka acknowledged before the due time always win?

Starts Apache Kafka (or Tansu) and a node alone or a replica group of two as processes, sends
``--messages`` requests in one burst (due ``--due-from``..``--due-to`` s after the burst
starts), and cancels ``--cancel-ratio`` of them 0.5-2 s before their due time, while ingest is
still busy with the burst. A ``read_committed`` consumer of the target topic then counts:

- cancelled_delivered: cancels acknowledged at least the node's margin (250 ms) before the due
  time whose message was delivered anyway (must be 0);
- lost, duplicates, early (must be 0);
- lateness of the others (p50/p99/max, ms): what the cancel gate adds while ingest lags.

``--gate off`` sets ``node.cancel_margin_ms`` so large that the gate never holds (how chronos
behaved before the gate), to compare lateness in one run and show the check can fail.

    python scripts/cancel_burst_check.py --mode alone
    python scripts/cancel_burst_check.py --mode group --gate off

The last line is the JSON summary; exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from failover_check import Group, Replica

from chronos.devstack.check import Tally, add_broker_options, finish, staged
from chronos.devstack.watch import Collected, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.quantiles import percentile
from chronos.settings import NodeSettings, load_settings
from proxy.client import DelayClient, DelayRequest

#: The node's ``node.cancel_margin_ms`` (its default).
_MARGIN_MS = NodeSettings().cancel_margin_ms
_NO_GATE_MS = 10**12


@dataclass
class Summary(Tally):
    mode: str
    gate: str
    messages: int = 0
    burst_s: float = 0.0
    cancels_sent: int = 0
    cancels_in_time: int = 0
    cancel_lead_ms: list[int] = field(default_factory=list)
    cancelled_delivered: int = 0
    lateness_p50_ms: float = 0.0
    lateness_p99_ms: float = 0.0
    lateness_max_ms: int = 0

    @property
    def ok(self) -> bool:
        return not self.cancelled_delivered and self.exact


def _cancel_on_time(
    client: DelayClient, plan: list[tuple[float, str, int]], acked: dict[str, int]
) -> None:
    """Send each cancel at its planned epoch second, in small batches; note when Kafka acked."""
    index = 0
    while index < len(plan):
        now = time.time()
        due_now = []
        while index < len(plan) and plan[index][0] <= now:
            due_now.append(plan[index][1])
            index += 1
        if not due_now:
            time.sleep(min(0.005, max(0.0, plan[index][0] - now)))
            continue
        client.cancel_batch(due_now)
        ack_ms = int(time.time() * 1000)  # after the acks: an upper bound of each ack time
        for message_id in due_now:
            acked[message_id] = ack_ms


def run(args: argparse.Namespace, bootstrap: str, workdir: Path, summary: Summary) -> None:
    namespace = f"cb{uuid.uuid4().hex[:8]}"
    if args.gate == "off":
        os.environ["CHRONOS_NODE__CANCEL_MARGIN_MS"] = str(_NO_GATE_MS)
    group = Group(workdir, bootstrap, namespace) if args.mode == "group" else None
    replicas = (
        group.replicas
        if group is not None
        else [Replica("alone", workdir, bootstrap, namespace, group=None)]
    )
    try:
        for replica in replicas:
            replica.process.start()
        for replica in replicas:
            if not replica.process.wait_ready(120):
                raise SystemExit(f"{replica.name} did not start: see {replica.log_path}")
        if group is not None:
            group.master(timeout_s=120)
        settings = load_settings(replicas[0].config)
        topic = f"{namespace}-target"
        create_topic(settings, topic, partitions=4)
        seen = Collected()
        watcher = DeliveryWatcher(bootstrap, [topic], seen.add).start()
        time.sleep(2.0)
        rng = random.Random(args.seed)
        start = time.time()
        requests = []
        for _ in range(args.messages):
            due_ms = int((start + rng.uniform(args.due_from, args.due_to)) * 1000)
            requests.append(DelayRequest(topic, b"v", deliver_at=due_ms))
        with DelayClient(settings) as client:
            receipts = client.send_batch(requests)
            summary.burst_s = round(time.time() - start, 2)
            summary.messages = len(receipts)
            due = {r.id: r.deliver_at_ms for r in receipts}
            chosen = rng.sample(list(due), int(len(due) * args.cancel_ratio))
            plan = sorted((due[i] / 1000 - rng.uniform(0.5, 2.0), i, due[i]) for i in chosen)
            plan = [p for p in plan if p[0] > time.time() + 0.05]  # still ahead of us
            acked: dict[str, int] = {}
            _cancel_on_time(client, plan, acked)
        summary.cancels_sent = len(acked)
        in_time = {i for i, ack in acked.items() if ack <= due[i] - _MARGIN_MS}
        summary.cancels_in_time = len(in_time)
        leads = sorted(due[i] - acked[i] for i in acked)
        if leads:
            summary.cancel_lead_ms = [leads[0], leads[len(leads) // 2], leads[-1]]
        last_due = max(due.values())
        while time.time() * 1000 < last_due + args.settle * 1000:
            time.sleep(0.5)
        watcher.stop()
        summary.cancelled_delivered = sum(bool(seen.copies(i)) for i in due if i in in_time)
        # A cancel acknowledged too close to the due time: either outcome is right.
        kept = {i: due_ms for i, due_ms in due.items() if i not in in_time and i not in acked}
        lateness = summary.count(kept, seen)
        if lateness:
            summary.lateness_p50_ms = percentile(lateness, 0.5)
            summary.lateness_p99_ms = percentile(lateness, 0.99)
            summary.lateness_max_ms = max(lateness)
    finally:
        for replica in replicas:
            if replica.process.running():
                replica.process.signal(signal.SIGCONT)
                replica.process.terminate()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["alone", "group"], default="alone")
    parser.add_argument("--gate", choices=["on", "off"], default="on")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--cancel-ratio", type=float, default=0.1)
    parser.add_argument("--due-from", type=float, default=4.0, help="seconds after the burst")
    parser.add_argument("--due-to", type=float, default=12.0, help="seconds after the burst")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after the last due")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    add_broker_options(parser)
    args = parser.parse_args()
    summary = Summary(mode=args.mode, gate=args.gate)
    with staged(args, "cancel-burst") as stage:
        if any(stage.workdir.glob("store-*")):
            raise SystemExit(f"{stage.workdir} holds stores of an earlier run: give a new --keep")
        run(args, stage.bootstrap, stage.workdir, summary)
    return finish(summary, stage.workdir)


if __name__ == "__main__":
    threading.current_thread().name = "cancel-burst-check"
    sys.exit(main())

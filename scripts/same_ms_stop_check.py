#!/usr/bin/env python3
"""Clean stops in the middle of one millisecond: does a restart deliver anything twice?

Starts a broker and a node process, schedules ``--messages`` requests all due in the same
millisecond, and while that millisecond is being delivered stops the node with SIGTERM
``--stops`` times (each once a further share of the burst was seen delivered), restarting it
each time. A ``read_committed`` consumer then counts lost and duplicated deliveries and each
stop's exit code. The seek alone counts whole milliseconds; the node's key cursor is what
keeps a partly delivered one from going out again.

    python scripts/same_ms_stop_check.py                       # 200,000 messages, 5 stops
    python scripts/same_ms_stop_check.py --broker tansu

The last line is the JSON summary; exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from failover_check import Replica

from chronos.devstack.check import Tally, add_broker_options, finish, staged
from chronos.devstack.watch import Collected, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.settings import load_settings
from proxy.client import DelayClient, DelayRequest


@dataclass
class Summary(Tally):
    broker: str
    messages: int = 0
    send_s: float = 0.0
    stops: int = 0
    exit_codes: list[int] = field(default_factory=list)
    delivered_at_stop: list[int] = field(default_factory=list)
    all_delivered_after_s: float = 0.0

    @property
    def ok(self) -> bool:
        clean = all(code == 0 for code in self.exit_codes)
        return clean and self.exact


def _seen_count(seen: Collected) -> int:
    return len(seen.by_id())


def run(args: argparse.Namespace, bootstrap: str, workdir: Path, summary: Summary) -> None:
    namespace = f"ms{uuid.uuid4().hex[:8]}"
    node = Replica("alone", workdir, bootstrap, namespace, group=None)
    node.process.start()
    if not node.process.wait_ready(120):
        raise SystemExit(f"the node did not start: see {node.log_path}")
    settings = load_settings(node.config)
    topic = f"{namespace}-target"
    create_topic(settings, topic, partitions=4)
    seen = Collected()
    watcher = DeliveryWatcher(bootstrap, [topic], seen.add).start()
    try:
        due_ms = int((time.time() + args.lead) * 1000)
        started = time.time()
        with DelayClient(settings) as client:
            ids: list[str] = []
            for start in range(0, args.messages, 10_000):
                count = min(10_000, args.messages - start)
                batch = [DelayRequest(topic, b"x", deliver_at=due_ms) for _ in range(count)]
                ids += [r.id for r in client.send_batch(batch)]
        summary.send_s = round(time.time() - started, 2)
        summary.messages = len(ids)
        if time.time() * 1000 >= due_ms:
            raise SystemExit(f"sending took {summary.send_s} s, past --lead {args.lead} s")
        for k in range(1, args.stops + 1):
            target = len(ids) * k // (args.stops + 1)
            while _seen_count(seen) < target:
                time.sleep(0.002)
            summary.delivered_at_stop.append(_seen_count(seen))
            summary.exit_codes.append(node.process.terminate())
            summary.stops += 1
            node.process.start()
            if not node.process.wait_ready(120):
                raise SystemExit(f"the node did not restart: see {node.log_path}")
        deadline = time.time() + 120
        while _seen_count(seen) < len(ids) and time.time() < deadline:
            time.sleep(0.05)
        summary.all_delivered_after_s = round(time.time() - due_ms / 1000, 2)
        time.sleep(2.0)  # duplicates would arrive by now
    finally:
        watcher.stop()
        if node.process.running():
            node.process.terminate()
    summary.count(dict.fromkeys(ids, due_ms), seen)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--stops", type=int, default=5)
    parser.add_argument(
        "--lead", type=float, default=40.0, help="seconds from the start to the due time"
    )
    add_broker_options(parser)
    args = parser.parse_args()
    with staged(args, "same-ms") as stage:
        summary = Summary(broker=stage.broker_name)
        run(args, stage.bootstrap, stage.workdir, summary)
    return finish(summary, stage.workdir)


if __name__ == "__main__":
    sys.exit(main())

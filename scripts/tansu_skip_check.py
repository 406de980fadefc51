#!/usr/bin/env python3
"""Two loaders against the embedded broker: does the node ingest every acknowledged request?

Tansu (the broker of ``chronos dev``) was seen to hand a live consumer records past a range it
never returned (1,199,301 of 1,200,000 ingested; a re-read of the topic had the rest). The node
now reads a partition again whenever offsets jump (``chronos/node/inner_reader.py``). Each run
starts a fresh broker and a node, has two loader processes produce ``--messages`` requests each
(due in an hour, so nothing is delivered meanwhile) straight onto the inner topic, waits until
the node's ``ingested`` count stops moving, and compares it with what Kafka acknowledged. It
also counts the node's ``inner_gap_read_again`` and ``inner_records_skipped_then_found`` lines:
the second kind is a skip that would have been silent before.

    python scripts/tansu_skip_check.py --runs 4

The last line is the JSON summary; exit code 0 when every run ingested every request.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import cast

from confluent_kafka import Producer
from failover_check import Replica

from chronos import wire
from chronos.devstack.brokers import BROKER_KINDS, start_local_broker
from chronos.devstack.check import finish
from chronos.model import DelayMessage


def load(bootstrap: str, topic: str, count: int, prefix: str) -> int:
    """Produce ``count`` adds; returns how many Kafka acknowledged."""
    acked = 0

    def on_ack(error: object, _record: object) -> None:
        nonlocal acked
        if error is None:
            acked += 1

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    due_ms = int(time.time() * 1000) + 3_600_000
    for i in range(count):
        key, value, headers = wire.encode_add(
            DelayMessage(f"{prefix}-{i}", "skip-target", None, b"v", [], due_ms)
        )
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key,
                    headers=cast("list[tuple[str, str | bytes | None]]", headers),
                    on_delivery=on_ack,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    return acked


def _ingested(node: Replica) -> int:
    stats = node.events("node_stats")
    return int(stats[-1].get("ingested", 0)) if stats else 0


def one_run(args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    broker = start_local_broker(args.broker, workdir / "broker.log")
    try:
        namespace = f"ts{uuid.uuid4().hex[:8]}"
        node = Replica("alone", workdir, broker.bootstrap, namespace, group=None)
        node.process.start()
        if not node.process.wait_ready(120):
            raise SystemExit(f"the node did not start: see {node.log_path}")
        inner = f"{namespace}.inner"
        loaders = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--load",
                    broker.bootstrap,
                    inner,
                    str(args.messages),
                    p,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for p in ("a", "b")
        ]
        acked = sum(int((p.communicate(timeout=1200)[0] or "0").strip() or 0) for p in loaders)
        last, still_since = -1, time.monotonic()
        while time.monotonic() - still_since < args.settle:
            now = _ingested(node)
            if now != last:
                last, still_since = now, time.monotonic()
            if now >= acked:
                break
            time.sleep(1.0)
        node.process.terminate()
        ingested = _ingested(node)
        return {
            "acknowledged": acked,
            "ingested": ingested,
            "reread": len(node.events("inner_gap_read_again")),
            "skips_found": len(node.events("inner_records_skipped_then_found")),
            "ok": ingested == acked == 2 * args.messages,
        }
    finally:
        broker.stop()


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--load":
        print(load(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--messages", type=int, default=600_000, help="per loader")
    parser.add_argument("--settle", type=float, default=30.0, help="s without progress to stop")
    parser.add_argument("--broker", choices=BROKER_KINDS, default="tansu")
    parser.add_argument("--keep", default=None, help="work directory to keep (logs)")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="chronos-tansu-skip-"))
    runs = []
    for n in range(args.runs):
        workdir = root / f"run{n}"
        workdir.mkdir(parents=True, exist_ok=True)
        runs.append(one_run(args, workdir))
        print(json.dumps(runs[-1]), flush=True)
    print(f"logs: {root}")
    return finish({"broker": args.broker, "runs": runs, "ok": all(r["ok"] for r in runs)})


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Restore check (issue 38, acceptance 2): what does an empty replica read to restore its
store from a compacted inner topic, against the live state, and how soon may it take over?

On Apache Kafka, in compact mode (``rebuild.mode = "compact"``), a replica group whose master
runs alone:

1. ``--pending`` messages (default 1 M) due two to three hours ahead are produced to the inner
   topic and the master ingests them;
2. ``--rate`` messages a second (default 10,000) due 1-5 s ahead arrive for ``--seconds``
   (default 600): they are delivered, kept ``delete.retention_s`` (``--retention``) for the
   dedupe window and then expired with a tombstone, as the node's defaults do in this mode;
3. at each of ``--restore-at`` seconds into that traffic (it goes on), the inner topic is read
   from its start to its end by a bare consumer (what a restore reads: records and bytes;
   what a fully compacted topic would hold: the ids whose last record is not a tombstone),
   and then an empty replica starts and restores. Its time to ``replica_eligible`` (it may
   take over) is measured from its start, with its CPU, and it is stopped and dropped again.

Restores late in the window read about what early ones do when the topic holds about the live
state plus a bounded head, whatever the traffic's duration: so the run shows the bound without
an hour of traffic. Pass: every restore eligible within ``--eligible-s`` (60).

    python scripts/restore_check.py
    python scripts/restore_check.py --restore-at 300 600 --keep /tmp/restore

The last line of output is the JSON summary. Exit code 0 when it holds.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from chronos.bench.load import LoadSpec, generate
from chronos.bench.sampler import cpu_seconds
from chronos.bench.scenarios import preload_pending, spawn_pool
from chronos.bench.stack import BenchStack, TopicLayout
from chronos.devstack.check import finish


@dataclass
class TopicRead:
    """The inner topic read from its start to the end it had when the read began."""

    records: int = 0
    bytes: int = 0
    tombstones: int = 0
    #: Ids whose last record is not a tombstone: what a fully compacted topic holds.
    live_ids: int = 0
    live_bytes: int = 0
    offsets_spanned: int = 0
    seconds: float = 0.0


def _size(key: bytes | None, value: bytes | None, headers: list[Any] | None) -> int:
    """A record's key, value and header bytes (what a consumer receives, without framing)."""
    size = len(key or b"") + len(value or b"")
    for name, header in headers or ():
        size += len(name) + len(header or b"")
    return size


def read_topic(bootstrap: str, topic: str, partitions: int) -> TopicRead:
    """Every record of ``topic`` from its start to its current end, as a restore reads it."""
    started = time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "restore-check",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.max.bytes": 64 * 1024 * 1024,
        }
    )
    read = TopicRead()
    ends: dict[int, int] = {}
    for number in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), 30.0)
        read.offsets_spanned += high - low
        if high > low:
            ends[number] = high
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    last: dict[bytes, int] = {}  # id -> size of its last record, -1 for a tombstone
    while ends:
        for record in consumer.consume(10_000, 1.0):
            if record.error():
                continue
            partition, offset = record.partition(), record.offset()
            if partition is None or offset is None or partition not in ends:
                continue
            if offset >= ends[partition]:
                continue  # appended after the read began
            key, value = record.key(), record.value()
            size = _size(key, value, cast("list[Any] | None", record.headers()))
            read.records += 1
            read.bytes += size
            if value is None:
                read.tombstones += 1
            last[bytes(key or b"")] = -1 if value is None else size
            if offset + 1 >= ends[partition]:
                del ends[partition]
        # A partition whose last offsets are transaction markers or compacted away.
        for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
            if tp.offset >= ends[tp.partition]:
                ends.pop(tp.partition, None)
    consumer.close()
    live = [size for size in last.values() if size >= 0]
    read.live_ids = len(live)
    read.live_bytes = sum(live)
    read.seconds = round(time.monotonic() - started, 1)
    return read


def _wait_logged(log: Path, event: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and event in log.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def restore_once(stack: BenchStack, index: int, timeout_s: float) -> dict[str, Any]:
    """Start an empty replica, time it to ``replica_eligible``, stop it and drop its store."""
    replica = stack.new_replica(index)
    started = time.monotonic()
    replica.start()
    try:
        eligible = replica.wait_ready(timeout_s)
        eligible_s = time.monotonic() - started
        cpu_s = cpu_seconds(replica.pid)
    finally:
        replica.terminate()
    shutil.rmtree(stack.workdir / f"store-{index}", ignore_errors=True)
    return {
        "eligible": eligible,
        "eligible_s": round(eligible_s, 1),
        "cpu_s": round(cpu_s, 1),
    }


def _node_settings(args: argparse.Namespace) -> str:
    return (
        f"ingest_threads = {args.ingest_threads}\n"
        '[rebuild]\nmode = "compact"\n'
        f"[delete]\ninterval_s = {args.delete_interval}\nretention_s = {args.retention}\n"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    layout = TopicLayout(inner=args.inner_partitions, target=8)
    stack = BenchStack(
        bootstrap=None,
        node_settings=_node_settings(args),
        layout=layout,
        broker="kafka",
        replicas=1,
    )
    restores: list[dict[str, Any]] = []
    with stack:
        preload_pending(stack, args.pending)
        stack.start_node()
        if not _wait_logged(stack.workdir / "node.log", "ingest_caught_up", 900):
            raise RuntimeError(f"the master did not catch up, see {stack.workdir}")
        traffic = LoadSpec(
            stack.bootstrap,
            stack.inner_topic,
            stack.target,
            int(args.rate * args.seconds),
            args.rate,
            delay_min_ms=1000,
            delay_max_ms=5000,
            prefix=f"steady-{time.time_ns()}",
        )
        with spawn_pool(1) as pool:
            began = time.monotonic()
            sending = pool.submit(generate, traffic)
            for index, at_s in enumerate(args.restore_at, start=1):
                time.sleep(max(0.0, began + at_s - time.monotonic()))
                topic = read_topic(stack.bootstrap, stack.inner_topic, args.inner_partitions)
                print(f"at {at_s:.0f} s the topic holds {asdict(topic)}", flush=True)
                restored = restore_once(stack, index, args.eligible_s * 5)
                restored.update(at_s=at_s, topic=asdict(topic))
                restored["read_per_live"] = round(topic.records / max(topic.live_ids, 1), 2)
                print(f"restore: {restored}", flush=True)
                restores.append(restored)
            sent = sending.result()
        if args.keep:
            keep = Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            for path in stack.workdir.glob("*.log"):
                shutil.copy(path, keep / path.name)
    result: dict[str, Any] = {
        "pending": args.pending,
        "rate": args.rate,
        "sent_rate": round(sent["rate"], 1),
        "retention_s": args.retention,
        "delete_interval_s": args.delete_interval,
        "inner_partitions": args.inner_partitions,
        "ingest_threads": args.ingest_threads,
        "restores": restores,
    }
    result["ok"] = all(r["eligible"] and r["eligible_s"] <= args.eligible_s for r in restores)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=10_000.0)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--restore-at", type=float, nargs="+", default=[300.0, 540.0])
    parser.add_argument("--retention", type=float, default=60.0, help="delete.retention_s")
    parser.add_argument("--delete-interval", type=float, default=30.0, help="delete.interval_s")
    parser.add_argument("--inner-partitions", type=int, default=4)
    parser.add_argument("--ingest-threads", type=int, default=1, help="node.ingest_threads")
    parser.add_argument("--eligible-s", type=float, default=60.0)
    parser.add_argument("--keep", default=None, help="directory to copy the logs into")
    args = parser.parse_args()
    result = run(args)
    return finish(result)


if __name__ == "__main__":
    sys.exit(main())

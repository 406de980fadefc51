#!/usr/bin/env python3
"""Rebuild benchmark: a refresh pass over N pending messages and an empty store rebuilt from
Kafka, on Apache Kafka (issue: "nothing lives on one disk alone").

1. N adds (``--payload`` bytes each, due hours ahead) are produced straight to the inner topic;
   a node alone (in this process) ingests them.
2. One refresh pass is timed: records, seconds, bytes the inner topic grew on the broker's disk.
3. The floor is published and every record below it deleted (what retention does after days).
4. The node stops, its store is deleted, it starts again and rebuilds: seconds until it
   delivers (``store_rebuilt_from_kafka``), inner bytes above the floor (what it reads), and a
   check that every message is back at its slot.

    python scripts/rebuild_bench.py --messages 1000000

The last line is the JSON result.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from chronos.bench.host import dir_bytes
from chronos.devstack.kafka import KafkaBroker
from chronos.kafka.admin import ensure_topics
from chronos.model import DelayMessage
from chronos.node.refresh import RefreshWorker
from chronos.runtime.node import Node
from chronos.schedule.floor import Floor
from chronos.settings import ChronosSettings
from chronos.wire import encode_add


def _settings(bootstrap: str, namespace: str, data_dir: Path, rate: int) -> ChronosSettings:
    return ChronosSettings.model_validate(
        {
            "kafka": {"bootstrap_servers": bootstrap},
            "topics": {"namespace": namespace},
            "node": {"node_id": "bench", "data_dir": data_dir},
            # Only the pass this script runs: the scheduled one is a day away.
            "rebuild": {"refresh_interval_s": 86_400, "refresh_rate": rate},
            "log": {"level": "warning"},
        }
    )


def _produce(bootstrap: str, topic: str, count: int, payload: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    due = int(time.time() * 1000) + 3 * 3600 * 1000
    value = b"x" * payload
    started = time.monotonic()
    for i in range(count):
        key, val, headers = encode_add(
            DelayMessage(f"m{i:09d}", "bench-target", None, value, [], due + i)
        )
        while True:
            try:
                producer.produce(
                    topic, val, key, headers=cast("list[tuple[str, str | bytes | None]]", headers)
                )
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return time.monotonic() - started


def _inner_bytes(broker: KafkaBroker, topic: str) -> int:
    assert broker.data_dir is not None
    return sum(dir_bytes(d) for d in broker.data_dir.glob(f"{topic}-*"))


def _refresher(node: Node) -> RefreshWorker:
    worker = node.component(RefreshWorker)
    assert worker is not None
    return worker


def _read_from(bootstrap: str, topic: str, start: dict[int, int]) -> tuple[int, int]:
    """Records and bytes (key, value, headers) from ``start`` to the end: what a rebuild reads."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rebuild-bench", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, p, o) for p, o in start.items()])
    records = size = 0
    done: set[int] = set()
    while len(done) < len(start):
        for message in consumer.consume(10_000, 1.0):
            if message.error() is not None:
                done.add(message.partition() or 0)
                continue
            records += 1
            size += len(message.key() or b"") + len(message.value() or b"")
            headers = cast("list[tuple[str, bytes | None]]", message.headers() or [])
            size += sum(len(k) + len(v or b"") for k, v in headers)
    consumer.close()
    return records, size


def _wait(condition: Any, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"timed out: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=100, help="value bytes per message")
    parser.add_argument("--refresh-rate", type=int, default=20_000, help="rebuild.refresh_rate")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="chronos-rebuild-bench-"))
    broker = KafkaBroker(log_path=work / "broker.log").start()
    result: dict[str, Any] = {"messages": args.messages, "payload_bytes": args.payload}
    try:
        settings = _settings(
            broker.bootstrap, f"rb{uuid.uuid4().hex[:6]}", work / "store", args.refresh_rate
        )
        inner = settings.topics.names.inner
        ensure_topics(settings)
        result["produce_s"] = round(
            _produce(broker.bootstrap, inner, args.messages, args.payload), 1
        )
        result["inner_bytes_before_pass"] = _inner_bytes(broker, inner)
        node = Node(settings)
        started = time.monotonic()
        node.start()
        assert node.wait_ready(1800), "ingest did not catch up"
        result["cold_ingest_s"] = round(time.monotonic() - started, 1)
        context = node.context
        assert context is not None
        _wait(lambda: context.floor.current is not None, 600, "the start-up pass")
        began = time.monotonic()
        floor = _refresher(node).run_pass()
        assert floor is not None
        result["pass_s"] = round(time.monotonic() - began, 1)
        result["pass_records_per_s"] = round(args.messages / result["pass_s"])
        time.sleep(2)  # the broker writes its segments
        result["inner_bytes_after_pass"] = _inner_bytes(broker, inner)
        result["pass_bytes"] = result["inner_bytes_after_pass"] - result["inner_bytes_before_pass"]
        context.floor.advance(Floor(floor.offsets, floor.at_ms + 1))
        time.sleep(2.5)  # published with the next cut (every second)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.delete_records(
            [TopicPartition(inner, p, o) for p, o in floor.offsets.items()]
        ).values():
            future.result(30)
        result["floor"] = floor.offsets
        node.stop()
        shutil.rmtree(settings.node.data_dir)
        node = Node(settings)
        started = time.monotonic()
        node.start()
        context = node.context
        assert context is not None and context.rebuild is not None
        rebuild = context.rebuild
        _wait(lambda: rebuild.done, 1800, "rebuild")
        result["rebuild_s"] = round(time.monotonic() - started, 1)
        result["rebuild_began_at"] = context.origin.began
        held = sum(1 for _ in context.store.scan(b"", b"\xff" * 16, 10 * args.messages))
        result["messages_held_after_rebuild"] = held
        node.stop()
        result["records_above_floor"], result["record_bytes_above_floor"] = _read_from(
            broker.bootstrap, inner, floor.offsets
        )
    finally:
        broker.stop()
    print(json.dumps(result))
    return 0 if result.get("messages_held_after_rebuild") == args.messages else 1


if __name__ == "__main__":
    sys.exit(main())

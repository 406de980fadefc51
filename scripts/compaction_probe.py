#!/usr/bin/env python3
"""What a compacted inner topic would cost on Apache Kafka (issue 38's design question):
records a restore reads against live ones, how fast a reader gets through them, and what the
broker's log cleaner spends, with chronos' churn.

1. ``--live`` keys (``--payload`` bytes, lz4) are produced to a compacted one-partition topic:
   the pending messages.
2. ``--rate`` new keys a second arrive for ``--seconds`` (messages due within seconds), and each
   one's tombstone follows ``--window`` seconds after it (delivered, then kept for the
   idempotency window; the tombstone is what the delete worker would write).
3. Every ``--every`` seconds meanwhile, and once at the end, the topic is read from its start
   to its end as a restore would: records and bytes read, seconds, live keys (the last record
   of a key not a tombstone); the broker's CPU since the last sample.

    python scripts/compaction_probe.py --live 1000000 --rate 10000 --seconds 300 --window 60

The last line is the JSON result.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.devstack.kafka import KafkaBroker

_TICK_S = 0.05


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": "lz4",
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 2_000_000,
        }
    )


def _load(bootstrap: str, topic: str, live: int, payload: bytes) -> float:
    started = time.monotonic()
    producer = _producer(bootstrap)
    for n in range(live):
        while True:
            try:
                producer.produce(topic, payload, f"pending-{n}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(300)
    return time.monotonic() - started


def _churn(
    bootstrap: str, topic: str, rate: int, seconds: float, window: float, payload: bytes
) -> dict[str, int]:
    """``rate`` adds a second, each one's tombstone ``window`` seconds later, paced in ticks."""
    producer = _producer(bootstrap)
    started = time.monotonic()
    added = tombstoned = 0
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= seconds + window:
            break
        adds_due = int(min(elapsed, seconds) * rate)
        tombstones_due = int(max(0.0, min(elapsed - window, seconds)) * rate)
        for n in range(added, adds_due):
            producer.produce(topic, payload, f"churn-{n}".encode())
        for n in range(tombstoned, tombstones_due):
            producer.produce(topic, None, f"churn-{n}".encode())
        added, tombstoned = adds_due, tombstones_due
        producer.poll(0)
        time.sleep(_TICK_S)
    producer.flush(120)
    return {"added": added, "tombstoned": tombstoned}


def _read_all(bootstrap: str, topic: str) -> dict[str, Any]:
    """Read the topic from its start to its end, as a restore would."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 52_428_800,
        }
    )
    started = time.monotonic()
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records = nbytes = 0
    last: dict[bytes, bool] = {}
    done = high <= low
    while not done:
        for message in consumer.consume(10_000, 1.0):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and (message.offset() or 0) >= high:
                    done = True
                continue
            records += 1
            value = message.value()
            key = message.key() or b""
            nbytes += len(key) + (len(value) if value else 0)
            last[key] = value is not None
            if (message.offset() or 0) >= high - 1:
                done = True
    consumer.close()
    return {
        "records": records,
        "bytes": nbytes,
        "seconds": round(time.monotonic() - started, 2),
        "live": sum(last.values()),
        "tombstones": len(last) - sum(last.values()),
        "log_start": low,
        "log_end": high,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live", type=int, default=1_000_000)
    parser.add_argument("--payload", type=int, default=100)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--window", type=float, default=60)
    parser.add_argument("--every", type=float, default=60)
    parser.add_argument("--segment-bytes", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--dirty-ratio", type=float, default=0.1)
    parser.add_argument("--max-lag-ms", type=int, default=60_000)
    parser.add_argument("--tombstone-ms", type=int, default=300_000)
    args = parser.parse_args()
    payload = os.urandom(args.payload)
    topic = "probe.inner"
    result: dict[str, Any] = {"args": vars(args), "samples": []}
    with KafkaBroker(heap="1g", properties={"log.cleaner.backoff.ms": "5000"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        config = {
            "cleanup.policy": "compact",
            "segment.bytes": str(args.segment_bytes),
            "min.cleanable.dirty.ratio": str(args.dirty_ratio),
            "max.compaction.lag.ms": str(args.max_lag_ms),
            "delete.retention.ms": str(args.tombstone_ms),
        }
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
        pid = broker.pid
        assert pid is not None
        result["load_s"] = round(_load(broker.bootstrap, topic, args.live, payload), 1)
        cpu_at, wall_at = _cpu_s(pid), time.monotonic()
        churned: dict[str, int] = {}
        churn = threading.Thread(
            target=lambda: churned.update(
                _churn(broker.bootstrap, topic, args.rate, args.seconds, args.window, payload)
            )
        )
        started = time.monotonic()
        churn.start()
        while churn.is_alive():
            churn.join(args.every)
            sample = _read_all(broker.bootstrap, topic)
            cpu, wall = _cpu_s(pid), time.monotonic()
            sample["at_s"] = round(wall - started, 1)
            sample["broker_cpu_pct"] = round(100 * (cpu - cpu_at) / (wall - wall_at), 1)
            cpu_at, wall_at = cpu, wall
            result["samples"].append(sample)
            print(json.dumps(sample), flush=True)
        result["churn"] = churned
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

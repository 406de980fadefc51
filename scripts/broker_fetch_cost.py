#!/usr/bin/env python3
"""How the broker's CPU grows with the data it holds, per consumer fetch setting.

A producer writes --rate records/s (300 bytes, idempotent, linger 5 ms) to one partition for
--seconds while a consumer reads it from the start with the given fetch settings; every 10 s
the broker's CPU share of one core over those 10 s is printed. With `--consumer none` only
the producer runs. The consumer's lag (arrival minus record timestamp) is printed at the end.
It measures the broker, not chronos: it is why the benchmark's observer waits long between
fetches (docs/benchmarks/README.md, round 7).

    python scripts/broker_fetch_cost.py --consumer none
    python scripts/broker_fetch_cost.py --fetch-wait-ms 50
    python scripts/broker_fetch_cost.py --fetch-wait-ms 500
    python scripts/broker_fetch_cost.py --rate 200 --seconds 20 --fetch-wait-ms 50   # lag
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from chronos.bench.sampler import cpu_seconds
from chronos.devstack.tansu import TansuBroker
from chronos.kafka.admin import create_topic
from chronos.quantiles import nearest_rank
from chronos.settings import ChronosSettings, KafkaSettings

_REPORT_EVERY_S = 10.0


def _consume(
    bootstrap: str, topic: str, config: dict[str, int], stop: threading.Event, lags: list[int]
) -> None:
    """Read until stopped; ``lags`` gets each record's arrival minus its timestamp, in ms."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fetch-cost",
            "enable.auto.commit": False,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    while not stop.is_set():
        # A short timeout, so a slow flow's records are not held back to fill a batch.
        records = consumer.consume(1000, 0.005)
        now_ms = time.time_ns() // 1_000_000
        lags.extend(now_ms - record.timestamp()[1] for record in records)
    consumer.close()


def _produce(
    bootstrap: str, topic: str, rate: float, seconds: float, broker_pid: int
) -> list[float]:
    """Produce at ``rate`` for ``seconds``; the broker's CPU % of a core per 10 s window."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, "acks": "all"}
    )
    value = os.urandom(300)
    started = window_start = time.monotonic()
    window_cpu = cpu_seconds(broker_pid)
    shares: list[float] = []
    sent = 0
    while time.monotonic() - started < seconds:
        due = int((time.monotonic() - started) * rate)
        while sent < due:
            try:
                producer.produce(topic, value)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        time.sleep(0.005)
        if time.monotonic() - window_start >= _REPORT_EVERY_S:
            now_cpu, now = cpu_seconds(broker_pid), time.monotonic()
            shares.append(round(100 * (now_cpu - window_cpu) / (now - window_start), 1))
            print(f"t={now - started:5.0f} s  broker {shares[-1]:5.1f} % of a core", flush=True)
            window_cpu, window_start = now_cpu, now
    producer.flush(30)
    return shares


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=25_000.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--consumer", choices=("none", "one"), default="one")
    parser.add_argument("--fetch-wait-ms", type=int, default=50)
    parser.add_argument("--fetch-min-bytes", type=int, default=1)
    args = parser.parse_args()
    with TansuBroker() as broker:
        assert broker.pid is not None
        topic = f"fetch-cost-{uuid.uuid4().hex[:6]}"
        create_topic(
            ChronosSettings(kafka=KafkaSettings(bootstrap_servers=broker.bootstrap)), topic
        )
        stop = threading.Event()
        lags: list[int] = []
        reader = None
        if args.consumer == "one":
            config = {
                "fetch.wait.max.ms": args.fetch_wait_ms,
                "fetch.min.bytes": args.fetch_min_bytes,
            }
            reader = threading.Thread(
                target=_consume, args=(broker.bootstrap, topic, config, stop, lags), daemon=True
            )
            reader.start()
        shares = _produce(broker.bootstrap, topic, args.rate, args.seconds, broker.pid)
        stop.set()
        if reader is not None:
            reader.join(10)
    lags.sort()
    lag = {
        "p50": nearest_rank(lags, 0.5) if lags else None,
        "p99": nearest_rank(lags, 0.99) if lags else None,
    }
    print(json.dumps({**vars(args), "broker_cpu_percent_per_10s": shares, "consumer_lag_ms": lag}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

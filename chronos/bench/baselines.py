"""Baselines: the fastest Python Kafka relay, and the classic Redis sorted-set delay queue."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from chronos.bench.load import observe
from chronos.bench.sampler import ProcessSampler
from chronos.bench.scenarios import spawn_pool
from chronos.bench.stack import TopicLayout
from chronos.bench.stats import summarize
from chronos.devstack.brokers import BrokerKind, LocalBroker, start_local_broker
from chronos.devstack.tansu import free_port
from chronos.kafka.admin import create_topic
from chronos.settings import ChronosSettings, KafkaSettings
from chronos.wire import H_DUE, H_ID

Result = dict[str, Any]
_PRODUCER = {
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "acks": "all",
    "enable.idempotence": True,
    "queue.buffering.max.messages": 1_000_000,
}


def _fill(bootstrap: str, topic: str, count: int, payload: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER})
    value = os.urandom(payload)
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i).encode(), headers=[("bench", b"1")])
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)


def relay(bootstrap: str, source: str, sink: str, count: int) -> dict[str, float]:
    """Consume ``source`` and produce every record unchanged to ``sink``, as fast as Python can."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "relay",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(source, p, OFFSET_BEGINNING) for p in range(4)])
    producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER})
    moved, started, cpu_started = 0, 0.0, 0.0
    while moved < count:
        for record in consumer.consume(5000, 1.0):
            if record.error() is not None:
                continue
            if not started:
                started, cpu_started = time.monotonic(), time.process_time()
            while True:
                try:
                    producer.produce(
                        sink, value=record.value(), key=record.key(), headers=record.headers()
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            moved += 1
        producer.poll(0)
    producer.flush(120)
    elapsed = time.monotonic() - started
    # The whole process (librdkafka's threads too), as a node's CPU per message is counted.
    cpu_us = (time.process_time() - cpu_started) * 1e6 / max(moved, 1)
    return {
        "records": moved,
        "seconds": round(elapsed, 3),
        "rate": round(moved / elapsed),
        "cpu_us_per_record": round(cpu_us, 2),
    }


_RELAY_PARTITIONS = 4


def bare_relay(bootstrap: str, count: int, payload: int, log: Callable[[str], None]) -> Result:
    """The ceiling for any Python consume->produce broker with these clients and record sizes."""
    settings = ChronosSettings(kafka=KafkaSettings(bootstrap_servers=bootstrap))
    source, sink = f"relay-in-{uuid.uuid4().hex[:6]}", f"relay-out-{uuid.uuid4().hex[:6]}"
    create_topic(settings, source, _RELAY_PARTITIONS)
    create_topic(settings, sink, _RELAY_PARTITIONS)
    _fill(bootstrap, source, count, payload)
    with spawn_pool() as pool:
        result = pool.submit(relay, bootstrap, source, sink, count).result()
    log(f"bare relay: {result['rate']} records/s, {result['cpu_us_per_record']} us CPU per record")
    # Fixed, not the run's layout: 1 and 4 partitions relayed alike (round 5, item 14).
    return {**result, "partitions": _RELAY_PARTITIONS}


# Redisson / lmstfy style: payload by id, ZADD id with the due time as score, a Lua script that
# atomically moves due ids to a ready list, a worker that pops them and produces to Kafka.
_MOVE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
for i = 1, #due, 2 do
  redis.call('RPUSH', KEYS[2], due[i] .. '|' .. due[i + 1])
  redis.call('ZREM', KEYS[1], due[i])
end
return #due / 2
"""


def redis_load(
    port: int,
    count: int,
    rate: float,
    delay_min_ms: int,
    delay_max_ms: int,
    payload: int,
    prefix: str,
) -> dict[str, float]:
    """Schedule into Redis: SET payload + ZADD due, pipelined, at ``rate``/s (0: flat out)."""
    import redis

    client = redis.Redis(port=port)
    value = os.urandom(payload)
    span = max(delay_max_ms - delay_min_ms, 1)
    started, sent = time.monotonic(), 0
    while sent < count:
        target = count if rate <= 0 else min(count, int((time.monotonic() - started) * rate) + 1)
        now_ms = time.time_ns() // 1_000_000
        pipe = client.pipeline(transaction=False)
        for i in range(sent, min(target, sent + 5000)):
            message_id = f"{prefix}-{i}"
            pipe.set(f"p:{message_id}", value)
            pipe.zadd("delay", {message_id: now_ms + delay_min_ms + (i * 7919) % span})
        pipe.execute()
        sent = min(target, sent + 5000)
        if rate > 0:
            time.sleep(0.005)
    elapsed = time.monotonic() - started
    return {"sent": sent, "rate": sent / elapsed if elapsed else 0.0}


def redis_worker(port: int, bootstrap: str, topic: str, count: int, timeout_s: float) -> int:
    """Move due ids and produce their payloads to Kafka until ``count`` were sent."""
    import redis

    client = redis.Redis(port=port)
    move = client.register_script(_MOVE_DUE)
    producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER})
    sent, deadline = 0, time.monotonic() + timeout_s
    while sent < count and time.monotonic() < deadline:
        moved = move(keys=["delay", "ready"], args=[time.time_ns() // 1_000_000, 1000])
        ready = cast("list[bytes]", client.lpop("ready", 1000) or [])
        if not ready:
            if not moved:
                time.sleep(0.001)  # the classic design polls; 1 ms keeps it precise
            continue
        entries = [item.split(b"|") for item in ready]
        payloads = client.mget([b"p:" + message_id for message_id, _ in entries])
        for (message_id, due), value in zip(entries, payloads, strict=True):
            producer.produce(
                topic,
                value=value,
                headers=[(H_ID, message_id), (H_DUE, str(int(float(due))).encode())],
            )
            sent += 1
        client.delete(*[b"p:" + message_id for message_id, _ in entries])
        producer.poll(0)
    producer.flush(60)
    return sent


class RedisServer:
    """A throw-away in-memory redis-server (Debian package) on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self._dir = tempfile.mkdtemp(prefix="chronos-redis-")

    def __enter__(self) -> RedisServer:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def used_memory(self) -> int:
        import redis

        return int(redis.Redis(port=self.port).info("memory")["used_memory"])

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(10)


def redis_steady(
    bootstrap: str,
    rate: float,
    seconds: float,
    payload: int,
    log: Callable[[str], None],
    max_delay_ms: int = 10_000,
    target_partitions: int = TopicLayout().target,
) -> Result:
    """The sorted-set queue at ``rate``/s with delays over 1-10 s, delivering to Kafka (a
    target topic of ``target_partitions``, as chronos' in the same run)."""
    settings = ChronosSettings(kafka=KafkaSettings(bootstrap_servers=bootstrap))
    topic = f"redis-target-{uuid.uuid4().hex[:6]}"
    create_topic(settings, topic, target_partitions)
    count = int(rate * seconds)
    with RedisServer() as server, spawn_pool(3) as pool:
        watching = pool.submit(observe, bootstrap, topic, count, seconds + max_delay_ms / 1000 + 90)
        working = pool.submit(redis_worker, server.port, bootstrap, topic, count, seconds + 60)
        with ProcessSampler(server.process.pid) as sampler:
            sent = pool.submit(
                redis_load, server.port, count, rate, 1000, max_delay_ms, payload, "r"
            ).result()
            seen = watching.result()
        working.result()
    result: Result = {
        "rate_target": rate,
        "seconds": seconds,
        "ingest_rate": sent["rate"],
        **summarize(seen, count),
        "redis_server": sampler.summary(),
        "topics": {"target_partitions": target_partitions},
    }
    result["sustained"] = (
        result["missing"] == 0
        and sent["rate"] >= 0.95 * rate
        and result["lateness_ms"]["p99"] <= 100
    )
    log(
        f"redis {rate:.0f}/s: delivered {result['delivered']}/{count}, "
        f"p99 {result['lateness_ms']['p99']} ms"
    )
    return result


def redis_memory(count: int, payload: int, log: Callable[[str], None]) -> Result:
    """Bytes of Redis memory per pending message (payload + sorted-set entry)."""
    with RedisServer() as server:
        before = server.used_memory()
        redis_load(server.port, count, 0, 86_400_000, 90_000_000, payload, "m")
        after = server.used_memory()
    per_message = (after - before) / count
    log(f"redis memory: {per_message:.0f} B per pending message ({count} pending)")
    return {
        "pending": count,
        "bytes_per_pending": round(per_message, 1),
        "used_memory_mib": round(after / 2**20, 1),
    }


def local_broker(
    bootstrap: str | None, workdir: Path, kind: BrokerKind = "tansu"
) -> tuple[str, LocalBroker | None]:
    """The given Kafka, or a local broker of ``kind`` for the baselines."""
    if bootstrap:
        return bootstrap, None
    broker = start_local_broker(kind, workdir / f"{kind}-baselines.log")
    return broker.bootstrap, broker

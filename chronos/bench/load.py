"""Load generation and delivery observation, each meant to run in a child process."""

from __future__ import annotations

import gc
import os
import threading
import time
from dataclasses import dataclass, field
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from chronos import wire
from chronos.devstack.watch import topic_partitions
from chronos.model import DelayMessage
from chronos.types import Headers

_TICK_S = 0.005


@dataclass(frozen=True)
class LoadSpec:
    """What to schedule.

    Parameters:
        bootstrap: Kafka bootstrap servers.
        inner_topic: where requests go (the wire format of chronos.wire).
        target: the topic messages are delivered to.
        count: number of messages.
        rate: messages per second (0: as fast as possible).
        delay_min_ms, delay_max_ms: delays spread uniformly (by index) over this range.
        due_at_ms: when set, every message is due at this instant instead (a burst).
        due_spread_ms: with ``due_at_ms``, the burst's due times spread over this many ms, in
            id order (0: all at the instant).
        payload_bytes: value size.
        prefix: id prefix, unique per run.
    """

    bootstrap: str
    inner_topic: str
    target: str
    count: int
    rate: float
    delay_min_ms: int = 1000
    delay_max_ms: int = 10_000
    due_at_ms: int | None = None
    due_spread_ms: int = 0
    payload_bytes: int = 200
    prefix: str = "b"


def steady_beside(
    bootstrap: str, inner: str, target: str, rate: float, seconds: float, delay_ms: int
) -> tuple[LoadSpec, threading.Thread]:
    """A steady load of ``rate``/s to ``target`` for ``seconds``, every message due
    ``delay_ms`` after it is sent (ids ``o-<n>``), produced by a started daemon thread: the
    other topic a check watches beside what it hurts."""
    spec = LoadSpec(
        bootstrap,
        inner,
        target,
        count=int(rate * seconds),
        rate=rate,
        delay_min_ms=delay_ms,
        delay_max_ms=delay_ms,
        prefix="o",
    )
    thread = threading.Thread(target=generate, args=(spec,), daemon=True, name="steady-load")
    thread.start()
    return spec, thread


def generate(spec: LoadSpec) -> dict[str, float]:
    """Produce ``spec.count`` delay requests at ``spec.rate``; returns achieved numbers."""
    producer = Producer(
        {
            "bootstrap.servers": spec.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    payload = os.urandom(spec.payload_bytes)
    span = max(spec.delay_max_ms - spec.delay_min_ms, 1)
    started = time.monotonic()
    sent = 0
    while sent < spec.count:
        target_sent = (
            spec.count
            if spec.rate <= 0
            else min(spec.count, int((time.monotonic() - started) * spec.rate) + 1)
        )
        now_ms = time.time_ns() // 1_000_000
        while sent < target_sent:
            due = (
                spec.due_at_ms + (sent * spec.due_spread_ms) // spec.count
                if spec.due_at_ms is not None
                else (now_ms + spec.delay_min_ms + (sent * 7919) % span)
            )
            message = DelayMessage(
                f"{spec.prefix}-{sent}", spec.target, None, payload, [("bench", b"1")], due
            )
            key, value, headers = wire.encode_add(message)
            while True:
                try:
                    producer.produce(
                        spec.inner_topic,
                        value=value,
                        key=key,
                        headers=cast("list[tuple[str, str | bytes | None]]", headers),
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        producer.poll(0)
        if spec.rate > 0:
            time.sleep(_TICK_S)
    producer.flush(120)
    elapsed = time.monotonic() - started
    return {
        "sent": sent,
        "seconds": elapsed,
        "rate": sent / elapsed if elapsed else 0.0,
        "cpu_s": time.process_time(),  # this child process's CPU, librdkafka threads included
    }


@dataclass
class Observation:
    """What arrived on the target topic."""

    unique: int = 0
    duplicates: int = 0
    early: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    per_second: dict[int, int] = field(default_factory=dict)
    #: Worst lateness among the records produced in each second (where spikes come from).
    worst_per_second: dict[int, int] = field(default_factory=dict)
    first_ms: int = 0
    last_ms: int = 0
    cpu_s: float = 0.0
    #: At visibility (``observe(visible=True)``): each record's timestamp minus its due time,
    #: to tell what the producing side took from what reading took.
    stamped_lateness_ms: list[int] = field(default_factory=list)
    #: When each record arrived (its timestamp, or when it was read at visibility), in the
    #: order of ``lateness_ms``: for lateness per interval of the run.
    arrived_ms: list[int] = field(default_factory=list)


def observe(
    bootstrap: str,
    topic: str,
    expected: int,
    timeout_s: float,
    idle_timeout_s: float = 30.0,
    visible: bool = False,
) -> Observation:
    """Read ``topic`` from the beginning until ``expected`` distinct ids arrived (or time out).

    Lateness is the delivered record's timestamp (set by the producing broker node) minus its
    ``chronos-due-ms`` header: it measures the broker, not this consumer. So the observer may
    read late and in large fetches, and leaves every per-second figure until the last record:
    during a run it shares the two cores with what it measures.

    ``visible``: lateness is when this ``read_committed`` consumer received the record instead,
    fetching without waiting: what a consumer of transactional delivery sees (a record becomes
    visible at its transaction's commit, after its timestamp).
    """
    # At visibility: a fetch returns once 64 KiB are readable or after 20 ms, so the observer
    # adds at most ~20 ms and makes at most a few hundred fetches a second. With 1 byte and
    # 10 ms, its fetches doubled the broker's CPU (25 -> 56 % at 5,000 msg/s) on 2 cores.
    fetch: dict[str, int] = {"fetch.wait.max.ms": 20, "fetch.min.bytes": 65_536} if visible else {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-observer",
            "enable.auto.commit": False,
            # Tansu (memory storage) spends CPU per fetch in proportion to what the partition
            # holds, so what a consumer costs it grows with the run: at 25,000 msg/s a consumer
            # with a 50 ms wait took it from 11 to 23-27 % of a core in 50 s, one with 500 ms
            # from 9 to 14-16 %, the producer alone 7-9 % throughout (two runs each,
            # scripts/broker_fetch_cost.py). The observer gives up nothing by waiting.
            "fetch.wait.max.ms": 500,
            "fetch.min.bytes": 262_144,
            **fetch,
        }
    )
    consumer.assign(
        [TopicPartition(topic, p, OFFSET_BEGINNING) for p in topic_partitions(bootstrap, topic)]
    )
    seen: set[bytes] = set()
    produced_ms: list[int] = []
    lateness_ms: list[int] = []
    stamped_lateness: list[int] = []
    duplicates = 0
    deadline = time.monotonic() + timeout_s
    last_progress = time.monotonic()
    # Nothing here forms reference cycles, and collections would walk the growing lists.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            # consume() waits for its whole batch or the timeout: at visibility, not long.
            records = consumer.consume(5000, 0.005 if visible else 0.5)
            if not records:
                if time.monotonic() - last_progress > idle_timeout_s:
                    break
                continue
            last_progress = time.monotonic()
            for record in records:
                if record.error() is not None:
                    continue
                message_id: bytes | None = None
                due: bytes | None = None
                # Consumed headers are always (str, bytes | None) pairs.
                for name, value in cast("Headers", record.headers() or ()):
                    if name == wire.H_ID:
                        message_id = value
                    elif name == wire.H_DUE:
                        due = value
                if message_id is None or due is None:
                    continue
                if message_id in seen:
                    duplicates += 1
                    continue
                seen.add(message_id)
                stamped = record.timestamp()[1]
                produced = int(time.time() * 1000) if visible else stamped
                produced_ms.append(produced)
                lateness_ms.append(produced - int(due))
                if visible:
                    stamped_lateness.append(stamped - int(due))
    finally:
        if gc_was_enabled:
            gc.enable()
        consumer.close()
    result = summarize_arrivals(produced_ms, lateness_ms)
    result.duplicates = duplicates
    result.stamped_lateness_ms = stamped_lateness
    result.cpu_s = time.process_time()
    return result


def summarize_arrivals(produced_ms: list[int], lateness_ms: list[int]) -> Observation:
    """Per-second counts and worst lateness, from the arrivals in the order they were read."""
    result = Observation(unique=len(produced_ms), lateness_ms=lateness_ms, arrived_ms=produced_ms)
    for produced, lateness in zip(produced_ms, lateness_ms, strict=True):
        result.early += lateness < 0
        second = produced // 1000
        result.per_second[second] = result.per_second.get(second, 0) + 1
        if lateness > result.worst_per_second.get(second, -1):
            result.worst_per_second[second] = lateness
    if produced_ms:
        result.first_ms, result.last_ms = min(produced_ms), max(produced_ms)
    return result

"""Per-stage CPU cost of the node's hot path, in microseconds per message.

Runs each stage of a node alone, in this process, on N real records: consuming the inner topic
from a local Tansu broker, decoding and validating, applying to a RocksDB store in a temporary
folder, scanning due keys into delivery jobs, producing them and waiting for the
acknowledgements. The full node runs these stages in threads that share one GIL, so their sum
bounds the node's rate per core; `chronos bench` measures the node as a whole.

    .venv/bin/python scripts/hotpath_bench.py [--count 100000] [--bootstrap host:port]
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from chronos import wire
from chronos.clock import SystemClock
from chronos.delivery.deadletter import DeadLetterPolicy, DeadLetters
from chronos.devstack.tansu import TansuBroker
from chronos.kafka.admin import create_topic
from chronos.kafka.clients import KafkaClients
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.node.inner_reader import decode_record
from chronos.node.interpreter import tune_interpreter
from chronos.node.progress import ProgressTracker
from chronos.node.push import JobQueue, PushWorker
from chronos.node.sender import RetrySchedule, Sender
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import ChronosSettings, KafkaSettings
from chronos.store.rocks import RocksStore


def _cpu() -> float:
    return time.thread_time()


def run(bootstrap: str, count: int, batch: int) -> dict[str, float]:
    settings = ChronosSettings(kafka=KafkaSettings(bootstrap_servers=bootstrap))
    names = settings.topics.names
    inner, target = f"hp-in-{uuid.uuid4().hex[:6]}", f"hp-out-{uuid.uuid4().hex[:6]}"
    create_topic(settings, inner, 8)
    create_topic(settings, target, 8)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    payload = os.urandom(200)
    due0 = int(time.time() * 1000) + 1000
    for i in range(count):
        message = DelayMessage(f"hp-{i}", target, None, payload, [("bench", b"1")], due0 + i % 500)
        key, value, headers = wire.encode_add(message)
        while True:
            try:
                producer.produce(inner, value=value, key=key, headers=headers)  # type: ignore[arg-type]
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(60)

    tune_interpreter()  # the node's GC and GIL settings, as in `chronos run`
    cost: dict[str, float] = {}
    consumer = Consumer(settings.kafka.consumer("hp"))
    consumer.assign([TopicPartition(inner, p, OFFSET_BEGINNING) for p in range(8)])
    records: list[Message] = []
    started = _cpu()
    while len(records) < count:
        records += [r for r in consumer.consume(batch, 1.0) if r.error() is None]
    cost["consume"] = _cpu() - started
    consumer.close()

    started = _cpu()
    for record in records:
        record.value(), record.headers(), record.partition(), record.offset()
    cost["accessors"] = _cpu() - started

    now = int(time.time() * 1000)
    started = _cpu()
    decoded = [decode_record(r, settings.limits, names, now) for r in records]
    cost["decode+validate+encode"] = _cpu() - started

    with tempfile.TemporaryDirectory() as folder:
        store = RocksStore(Path(folder), settings.store)
        frontier = Frontier(0)
        clock = SystemClock()
        ledger = Ledger(store, frontier, clock, settings.delete)
        started = _cpu()
        for i in range(0, count, batch):
            chunk = decoded[i : i + batch]
            ledger.apply_decoded(chunk, {0: i})
        cost["ledger.apply"] = _cpu() - started

        metrics = CountingMetrics()
        tracker = ProgressTracker(0, metrics, clock)
        jobs_q: JobQueue = queue.Queue()
        push = PushWorker(
            store=store,
            ledger=ledger,
            frontier=frontier,
            tracker=tracker,
            jobs=jobs_q,
            clock=clock,
            batch_max=batch,
            metrics=metrics,
        )
        while time.time() * 1000 < due0 + 600:
            time.sleep(0.05)
        started = _cpu()
        push.scan_due()
        cost["push scan (decode, jobs)"] = _cpu() - started
        batches = []
        while not jobs_q.empty():
            batches.append(jobs_q.get())
        assert sum(len(b) for b in batches) == count, sum(len(b) for b in batches)

        publisher = KafkaClients(settings.kafka, "hotpath").idempotent("hotpath", {"linger.ms": 5})
        sender = Sender(
            index=0,
            jobs=jobs_q,
            retries=RetrySchedule(),
            publisher=publisher,
            dead_letters=DeadLetters(publisher, "dlq", metrics),
            policy=DeadLetterPolicy.of(settings.delivery, publisher),
            tracker=tracker,
            clock=clock,
            metrics=metrics,
        )
        started = _cpu()
        for b in batches:
            now = clock.now_ms()
            for job in b:
                sender.send(job, now)
        cost["send (headers, produce)"] = _cpu() - started
        started = _cpu()
        publisher.flush(60)  # acknowledgements run here, on this thread
        cost["acks (flush + callbacks)"] = _cpu() - started
        started = _cpu()
        seek, cursor, followups = tracker.collect()
        ledger.commit_progress(seek, followups, cursor)
        cost["progress collect"] = _cpu() - started
        store.close()
    return {name: round(seconds / count * 1e6, 2) for name, seconds in cost.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    broker = None if args.bootstrap else TansuBroker().start()
    try:
        costs = run(args.bootstrap or cast(TansuBroker, broker).bootstrap, args.count, args.batch)
    finally:
        if broker is not None:
            broker.stop()
    width = max(map(len, costs))
    for name, micros in costs.items():
        print(f"{name:<{width}}  {micros:7.2f} µs/msg")
    total = sum(costs.values()) - costs["accessors"]  # accessors are part of the decode
    print(f"{'total':<{width}}  {total:7.2f} µs/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What the inner topic's partition count costs the broker alone, with no chronos node.

A producer configured as the proxy's (``KafkaSettings.producer``: idempotent, acks=all,
murmur2 on the id, linger 2 ms, or ``--producer-linger-ms``) writes ``--rate``
records/s of 200 bytes for ``--seconds`` into a topic of 1 or ``--partitions`` partitions,
while one consumer reads it (``read_committed``, fetches held up to 500 ms as a member's
are), with either librdkafka's fetch (``plain``: a fetch is answered at the first record,
and every fetch names every partition read) or the lingering fetch of a member's ingest
(``kafka.clients.lingering_fetch``: a fetch per linger while records wait); ``none`` runs
the producer alone; over the many partitions, with random ids and with the ids a proxy makes
up (``--ids``: ``sticky`` sticks to one partition for ``--sticky-ms``, 10 as the proxy's
``proxy.sticky_ids_ms``; ``proxy/sticky_ids.py``). Prints the broker's CPU (user + system,
/proc) per record written.

Why: issue 61 holds one member of 16 partitions to 1.1× a node alone over one partition,
broker included; this says how much of the difference the broker pays for the partitions
themselves, whatever reads them. Cases run in rounds, every other one backwards, after one
warm-up case; a fresh broker's JIT compiles for a minute or more, so a long-lived broker
(``--bootstrap`` with ``--broker-pid``) gives steadier figures. Exit 1 if a reader read nothing.

    python scripts/inner_partitions_cost.py                        # 1 and 16, every reader
    python scripts/inner_partitions_cost.py --readers plain linger --rounds 3
    python scripts/inner_partitions_cost.py --readers none linger --ids random sticky
    python scripts/inner_partitions_cost.py --bootstrap HOST:PORT --broker-pid PID
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

from confluent_kafka import Consumer, Producer

from chronos.bench.sampler import cpu_seconds
from chronos.devstack.check import add_broker_options, staged
from chronos.kafka.admin import create_topic
from chronos.kafka.clients import LONG_POLL_MS, lingering_fetch
from chronos.settings import ChronosSettings, KafkaSettings
from proxy.sticky_ids import StickyIds

READERS = ("none", "plain", "linger")
IDS = ("random", "sticky")
_VALUE = b"x" * 200


@dataclass
class Case:
    partitions: int
    reader: str
    ids: str
    records: int
    #: Records the reader read (0 without one): a reader that failed reads none.
    read: int
    broker_us_per_record: float
    broker_core_share: float


def _read(
    bootstrap: str,
    topic: str,
    reader: str,
    linger_ms: int,
    stop: threading.Event,
    read: list[int],
) -> None:
    """Read ``topic`` until stopped, as ``reader`` fetches; ``read[0]`` counts the records."""
    extra = lingering_fetch(linger_ms) if reader == "linger" else {}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": LONG_POLL_MS,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            read[0] += sum(1 for record in consumer.consume(500, 0.1) if record.error() is None)
    finally:
        consumer.close()


def _produce(
    producer: Producer, topic: str, rate: int, seconds: float, new_id: Callable[[], str]
) -> int:
    """Write ``rate`` records a second for ``seconds``, each keyed by a ``new_id``; returns
    how many."""
    written = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        ahead = start + written / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        producer.produce(topic, _VALUE, key=new_id().encode())
        producer.poll(0)
        written += 1
    return written


def _case(
    args: argparse.Namespace, bootstrap: str, pid: int, partitions: int, reader: str, ids: str
) -> Case:
    topic = f"inner-cost-{partitions}-{uuid.uuid4().hex[:8]}"
    settings = ChronosSettings(kafka=KafkaSettings(bootstrap_servers=bootstrap))
    create_topic(settings, topic, partitions)
    producer = Producer(settings.kafka.producer(**{"linger.ms": args.producer_linger_ms}))
    stop = threading.Event()
    read = [0]
    thread = None
    if reader != "none":
        thread = threading.Thread(
            target=_read, args=(bootstrap, topic, reader, args.linger_ms, stop, read), daemon=True
        )
        thread.start()
    stick_ms = args.sticky_ms if ids == "sticky" else 0
    new_id = StickyIds(lambda: partitions, stick_ms).new
    try:
        _produce(producer, topic, args.rate, args.warmup, new_id)
        before = cpu_seconds(pid)
        written = _produce(producer, topic, args.rate, args.seconds, new_id)
        used = cpu_seconds(pid) - before
        producer.flush(30)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    return Case(
        partitions, reader, ids, written, read[0], used * 1e6 / written, used / args.seconds
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=16, help="the many-partition topic")
    parser.add_argument("--readers", nargs="+", choices=READERS, default=list(READERS))
    parser.add_argument("--ids", nargs="+", choices=IDS, default=list(IDS))
    parser.add_argument(
        "--sticky-ms", type=int, default=10, help="sticky ids: how long in one partition"
    )
    parser.add_argument("--rate", type=int, default=2000, help="records per second")
    parser.add_argument("--seconds", type=float, default=25.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before it")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--linger-ms", type=int, default=20, help="the lingering fetch's")
    parser.add_argument(
        "--producer-linger-ms", type=int, default=2, help="the producer's (the proxy's: 2)"
    )
    parser.add_argument(
        "--broker-pid", type=int, help="the process of the broker --bootstrap names"
    )
    add_broker_options(parser)
    args = parser.parse_args()
    with staged(args, "inner-cost", temporary=True) as stage:
        pid = stage.broker.pid if stage.broker is not None else args.broker_pid
        if pid is None:
            parser.error("--bootstrap needs --broker-pid: the broker's CPU is what is measured")
        _case(args, stage.bootstrap, pid, 1, args.readers[-1], "random")  # the JIT's warm-up
        cases: list[Case] = []
        # Over one partition every id lands in it: random ids only.
        kinds = [(1, "random")] + [(args.partitions, ids) for ids in args.ids]
        order = [(r, p, i) for r in args.readers for p, i in kinds]
        for number in range(args.rounds):
            # Every other round backwards: a drift of the broker favours no case.
            for reader, partitions, ids in order if number % 2 == 0 else order[::-1]:
                case = _case(args, stage.bootstrap, pid, partitions, reader, ids)
                print(json.dumps(asdict(case)), flush=True)
                cases.append(case)
    for reader in args.readers:
        for partitions, ids in kinds:
            costs = [
                c.broker_us_per_record
                for c in cases
                if (c.partitions, c.reader, c.ids) == (partitions, reader, ids)
            ]
            shown = ", ".join(f"{cost:.1f}" for cost in costs)
            print(
                f"{reader:6s} {partitions:3d} partitions, {ids:6s} ids:"
                f" broker µs per record {shown}"
            )
    unread = [asdict(c) for c in cases if c.reader != "none" and c.read == 0]
    if unread:
        print(f"readers that read nothing (their figures say nothing): {unread}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fuzz the node's intake: mutated inner records, oversized ones among them, between valid ones.

Produces --records records to the inner topic (4 partitions, a node process reading them),
about half valid requests due within two seconds and half mutations of valid ones: a required
header dropped or garbled, numbers with signs, spaces, underscores or past 64 bits, reserved
chronos- headers, invalid topics, random bytes, and oversized keys and headers (up to 1.5 MB, in
an inner topic that takes 2 MB, so their dead letters exceed the dead-letter topic's limit and
must be shrunk). Then checks:

- every valid request delivered exactly once (none missing: no partition stalled);
- every invalid record dead-lettered exactly once, by its source partition and offset;
- nothing delivered that was not valid.

    python scripts/fuzz_inner.py --broker kafka --records 10000

The last line of output is the JSON summary; exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos import wire
from chronos.devstack.check import add_broker_options, finish, staged
from chronos.devstack.process import NodeProcess
from chronos.devstack.watch import Delivered, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.model import DelayMessage
from chronos.settings import load_settings
from chronos.types import Headers

INNER_PARTITIONS = 4
INNER_MAX_BYTES = 2_000_000
KafkaHeaders = list[tuple[str, str | bytes | None]]
Record = tuple[bytes | None, bytes | None, Headers]


def valid_record(rng: random.Random, topic: str, index: int) -> tuple[str, Record]:
    message_id = f"ok-{index}-{uuid.uuid4().hex[:8]}"
    headers: Headers = [(f"h{i}", rng.randbytes(rng.randint(0, 40))) for i in range(3)]
    message = DelayMessage(
        message_id,
        topic,
        rng.randbytes(8),
        rng.randbytes(rng.randint(0, 300)),
        headers,
        int(time.time() * 1000) + rng.randint(0, 2000),
    )
    return message_id, wire.encode_add(message)


def _replace(headers: Headers, name: str, value: bytes | None) -> Headers:
    return [(n, value if n == name else v) for n, v in headers]


def mutate(rng: random.Random, record: Record, inner_topic: str) -> tuple[str, Record]:
    """One invalid variant of a valid record, and the name of the mutation."""
    key, value, headers = record
    due = dict(headers)[wire.H_DUE] or b"0"
    choices: list[tuple[str, Record]] = [
        ("no version", (key, value, [h for h in headers if h[0] != wire.H_VERSION])),
        ("no id", (key, value, [h for h in headers if h[0] != wire.H_ID])),
        ("no topic", (key, value, [h for h in headers if h[0] != wire.H_TOPIC])),
        ("version 2", (key, value, _replace(headers, wire.H_VERSION, b"2"))),
        ("op explode", (key, value, _replace(headers, wire.H_OP, b"explode"))),
        ("due +N", (key, value, _replace(headers, wire.H_DUE, b"+" + due))),
        ("due spaces", (key, value, _replace(headers, wire.H_DUE, b" " + due + b" "))),
        ("due underscores", (key, value, _replace(headers, wire.H_DUE, due[:4] + b"_" + due[4:]))),
        ("due 20 digits", (key, value, _replace(headers, wire.H_DUE, b"9" * 20))),
        ("due negative", (key, value, _replace(headers, wire.H_DUE, b"-5"))),
        ("due twice", (key, value, [*headers, (wire.H_DUE, due)])),
        ("reserved header", (key, value, [("chronos-trace", b"x"), *headers])),
        ("reserved header case", (key, value, [("Chronos-Trace", b"x"), *headers])),
        ("internal topic", (key, value, _replace(headers, wire.H_TOPIC, inner_topic.encode()))),
        ("bad topic", (key, value, _replace(headers, wire.H_TOPIC, b"no spaces please"))),
        ("id not utf-8", (key, value, _replace(headers, wire.H_ID, b"\xff\xfe"))),
        ("repeat garbage", (key, value, [*headers, (wire.H_REPEAT, b"sometimes")])),
        ("random bytes", (rng.randbytes(16), rng.randbytes(rng.randint(0, 500)), [])),
    ]
    if rng.random() < 0.05:
        # Bulk in keys and headers, under the inner topic's limit and too large to dead-letter
        # whole: in the target key and the headers (over the request limit), or in the record
        # key (not the id) and the headers.
        size = rng.randint(1_100_000, 1_500_000)
        big = rng.randbytes(size // 3)
        bulk: Headers = [("bulk", rng.randbytes(size - len(big)))]
        if rng.random() < 0.5:
            target_key = _replace(headers, wire.H_KEY, big)
            return "oversized target key and headers", (key, value, [*bulk, *target_key])
        return "oversized record key and headers", (big, value, [*bulk, *headers])
    return rng.choice(choices)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_broker_options(parser)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with staged(args, "fuzz", temporary=True) as stage:
        summary = run(stage.bootstrap, stage.workdir, rng, args.records)
    return finish(summary | {"broker": stage.broker_name, "seed": args.seed})


def run(bootstrap: str, workdir: Path, rng: random.Random, count: int) -> dict[str, Any]:
    namespace = f"fuzz{uuid.uuid4().hex[:8]}"
    config = workdir / "chronos.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\n[topics]\nnamespace = "{namespace}"\n'
        f'[node]\ndata_dir = "{workdir / "store"}"\n[log]\nformat = "json"\n'
    )
    settings = load_settings(config)
    names = settings.topics.names
    # The operator's inner topic takes 2 MB records; the dead-letter topic keeps chronos'
    # default limit (created by the node).
    admin = AdminClient(settings.kafka.admin())
    inner = NewTopic(
        names.inner, INNER_PARTITIONS, 1, config={"max.message.bytes": str(INNER_MAX_BYTES)}
    )
    admin.create_topics([inner])[names.inner].result(30)
    target = f"{namespace}-target"
    create_topic(settings, target, 4)

    node = NodeProcess(config, workdir / "node.log")
    node.start()
    if not node.wait_ready(60):
        raise RuntimeError(f"node not ready, see {workdir / 'node.log'}")

    deliveries: Counter[str] = Counter()
    lock = threading.Lock()

    def on_delivered(delivered: Delivered) -> None:
        with lock:
            deliveries[delivered.id] += 1

    watcher = DeliveryWatcher(bootstrap, [target], on_delivered).start()
    producer = Producer(settings.kafka.producer(max_message_bytes=INNER_MAX_BYTES))
    valid_ids: set[str] = set()
    invalid_sources: dict[str, str] = {}  # "inner[p]@offset" -> mutation
    refused: list[str] = []
    mutations: Counter[str] = Counter()

    def on_invalid(mutation: str) -> Any:
        def done(error: KafkaError | None, msg: Any) -> None:
            if error is not None:
                refused.append(f"{mutation}: {error}")
                return
            invalid_sources[f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"] = mutation

        return done

    started = time.monotonic()
    for index in range(count):
        message_id, record = valid_record(rng, target, index)
        callback = None
        if rng.random() < 0.5:
            valid_ids.add(message_id)
        else:
            mutation, record = mutate(rng, record, names.inner)
            mutations[mutation] += 1
            callback = on_invalid(mutation)
        key, value, headers = record
        producer.produce(
            names.inner, value, key, headers=_kafka_headers(headers), on_delivery=callback
        )
        producer.poll(0)
    assert producer.flush(120) == 0, "inner records still unacknowledged"
    produce_s = time.monotonic() - started

    deadline = time.monotonic() + 120
    dead: Counter[str] = Counter()
    shrunk = 0
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{namespace}.fuzz",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 4_000_000,
        }
    )
    reader.assign([TopicPartition(names.dead_letter, 0, OFFSET_BEGINNING)])
    while time.monotonic() < deadline:
        for msg in reader.consume(500, 0.5):
            if msg.error() is None:
                shrunk += _count_dead_letter(msg, dead)
        with lock:
            all_valid = valid_ids <= deliveries.keys()
        if all_valid and invalid_sources.keys() <= dead.keys():
            time.sleep(3)  # let a second copy of anything show up
            for msg in reader.consume(10_000, 1.0):
                if msg.error() is None:
                    _count_dead_letter(msg, dead)
            break
    reader.close()
    watcher.stop()
    node.terminate()
    with lock:
        delivered = Counter(deliveries)
    missing = [i for i in valid_ids if i not in delivered]
    not_dead = [s for s in invalid_sources if s not in dead]
    summary: dict[str, Any] = {
        "records": count,
        "valid": len(valid_ids),
        "invalid": len(invalid_sources),
        "refused_by_broker": len(refused),
        "mutations": dict(mutations),
        "produce_seconds": round(produce_s, 1),
        "delivered_once": sum(1 for i in valid_ids if delivered[i] == 1),
        "delivered_more_than_once": sum(1 for i in valid_ids if delivered[i] > 1),
        "missing": len(missing),
        "delivered_not_valid": sum(1 for i in delivered if i not in valid_ids),
        "dead_lettered_once": sum(1 for s in invalid_sources if dead[s] == 1),
        "dead_lettered_more_than_once": sum(1 for s in invalid_sources if dead[s] > 1),
        "invalid_not_dead_lettered": len(not_dead),
        "dead_letters_shrunk": shrunk,
    }
    summary["ok"] = (
        summary["missing"] == 0
        and summary["delivered_more_than_once"] == 0
        and summary["delivered_not_valid"] == 0
        and summary["invalid_not_dead_lettered"] == 0
        and summary["dead_lettered_more_than_once"] == 0
        and not refused
    )
    return summary


def _count_dead_letter(msg: Message, dead: Counter[str]) -> bool:
    """Count a dead letter by its source; True when it was shrunk to fit."""
    fields = dict(cast(Headers, msg.headers() or []))
    dead[(fields.get(wire.H_DLQ_SOURCE) or b"").decode()] += 1
    return wire.H_DLQ_TRUNCATED in fields


def _kafka_headers(headers: Headers) -> KafkaHeaders:
    return list(headers)


if __name__ == "__main__":
    sys.exit(main())

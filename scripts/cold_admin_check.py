#!/usr/bin/env python3
"""How long a fresh admin client takes to answer its first ListOffsets (``stable_end``).

librdkafka's (2.16) first ListOffsets on a new client, made while another client of the
process was being destroyed, waited 1 or 3 s for its answer (5 of 30 here) and a few ms
otherwise: asked before the client's first connection was up, it is asked again a second or
three later. A cluster member asks fresh clients where logs end in its first claim round
after a return (read 3.05 s late: a 3.5 s gap in the leave check), and a new owner's cancel
gate asks one too. ``KafkaClients.admin`` now waits for a first answer (DescribeCluster)
before handing a client out: 0 of 30.

This alternates ``--clients`` raw clients (``AdminClient`` as librdkafka builds it) and
clients from ``KafkaClients.admin``, each asked once, and prints each kind's median, worst
and how many took longer than ``--slow-ms``. Exit 1 when a client from ``KafkaClients.admin``
did.

    python scripts/cold_admin_check.py                       # a local Apache Kafka
    python scripts/cold_admin_check.py --bootstrap HOST:PORT --clients 60
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from chronos.devstack.check import add_broker_options, staged
from chronos.kafka.admin import create_topic, stable_end
from chronos.kafka.clients import KafkaClients
from chronos.settings import ChronosSettings, KafkaSettings


class _Asker:
    """Makes new clients of one kind and times each one's first answer. The client before
    is dropped once the next is made: a client destroyed while another starts up is what
    made the first answer late here (a member closes and opens clients all the time)."""

    def __init__(self, open_admin: Callable[[], AdminClient]) -> None:
        self._open_admin = open_admin
        self._last: AdminClient | None = None

    def first_answer_ms(self, topic: str) -> float:
        """Milliseconds from making a client to its first stable end of ``topic``."""
        began = time.monotonic()
        client = self._open_admin()
        self._last = client  # the one before is destroyed here
        stable_end(client, topic)
        return (time.monotonic() - began) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=30, help="of each kind")
    parser.add_argument("--slow-ms", type=float, default=500.0)
    add_broker_options(parser)
    args = parser.parse_args()
    with staged(args, "cold-admin", temporary=True) as stage:
        settings = ChronosSettings(kafka=KafkaSettings(bootstrap_servers=stage.bootstrap))
        topic = f"cold-admin-{uuid.uuid4().hex[:8]}"
        create_topic(settings, topic, 1)
        producer = Producer(settings.kafka.producer())
        producer.produce(topic, b"x", key=b"x")
        producer.flush(30)
        clients = KafkaClients(settings.kafka, "cold-admin-check")
        kinds = {
            "raw": _Asker(lambda: AdminClient(settings.kafka.admin())),
            "KafkaClients.admin": _Asker(clients.admin),
        }
        taken: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(args.clients):
            for kind, asker in kinds.items():
                taken[kind].append(asker.first_answer_ms(topic))
    for kind, times in taken.items():
        slow = sum(1 for t in times if t > args.slow_ms)
        print(
            f"{kind:20s} median {statistics.median(times):7.1f} ms  worst {max(times):7.1f} ms"
            f"  over {args.slow_ms:.0f} ms: {slow} of {len(times)}"
        )
    return 1 if any(t > args.slow_ms for t in taken["KafkaClients.admin"]) else 0


if __name__ == "__main__":
    sys.exit(main())

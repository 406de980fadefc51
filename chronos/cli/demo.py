"""``chronos demo``: schedule a few hundred messages and watch them arrive on time."""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING

from chronos.arguments import add_config, duration_ms, settings_from

if TYPE_CHECKING:
    from chronos.devstack.watch import Delivered
    from chronos.settings import ChronosSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("demo", help="schedule messages and show them arrive")
    add_config(parser)
    parser.add_argument(
        "--count", type=int, default=300, help="messages to schedule (default %(default)s)"
    )
    parser.add_argument(
        "--max-delay",
        type=duration_ms,
        default=5000,
        help="delays spread over 0 to this: 5s, 2m, ... (default 5s)",
    )
    parser.set_defaults(func=main)


def _bar(done: int, total: int, width: int = 40) -> str:
    filled = width * done // max(total, 1)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def run_demo(settings: ChronosSettings, count: int, max_delay_ms: int) -> int:
    from chronos.devstack.watch import DeliveryWatcher
    from chronos.kafka.admin import create_topic
    from chronos.quantiles import percentile
    from proxy.client import DelayClient, DelayRequest

    """Schedule ``count`` messages over 0..max_delay; returns 0 when all came, none early."""
    topic = f"demo.{uuid.uuid4().hex[:8]}"
    create_topic(settings, topic, partitions=3)
    arrived: dict[str, Delivered] = {}
    lock = threading.Lock()

    def record(delivered: Delivered) -> None:
        with lock:
            arrived.setdefault(delivered.id, delivered)

    watcher = DeliveryWatcher(settings.kafka.bootstrap_servers, [topic], record)
    watcher.start()
    rng = random.Random()
    requests = [
        DelayRequest(
            topic,
            f"demo message {i}",
            delay=rng.uniform(0, max_delay_ms) / 1000.0,
            id=f"demo-{uuid.uuid4().hex[:12]}",
        )
        for i in range(count)
    ]
    with DelayClient(settings) as client:
        # The first request pays for the producer's start (id and metadata, ~0.5 s): take it
        # with one deliver-now message so the measured batch shows the broker, not the client.
        client.send_delay(topic, "warm-up", delay=0, id=f"demo-warm-{uuid.uuid4().hex[:8]}")
        count += 1
        client.send_batch(requests)
    print(f"scheduled {count} messages to {topic} over {max_delay_ms} ms", file=sys.stderr)
    deadline = time.monotonic() + max_delay_ms / 1000.0 + 30
    while time.monotonic() < deadline:
        done = len(arrived)
        print(f"\r{_bar(done, count)}", end="", file=sys.stderr, flush=True)
        if done >= count:
            break
        time.sleep(0.1)
    print(file=sys.stderr)
    watcher.stop()
    lateness = [d.lateness_ms for d in arrived.values()]
    early = sum(1 for v in lateness if v < 0)
    print(
        f"delivered {len(arrived)}/{count}, early {early}, lateness ms: "
        f"p50={percentile(lateness, 0.5)} p99={percentile(lateness, 0.99)} "
        f"max={max(lateness, default=0)}"
    )
    return 0 if len(arrived) == count and early == 0 else 1


def main(args: argparse.Namespace) -> int:
    return run_demo(settings_from(args), args.count, args.max_delay)

#!/usr/bin/env python3
"""End-to-end check of one chronos node against a real Kafka-protocol broker.

Schedules N messages (random binary keys, values and headers; delays spread over 0..D s)
through the proxy client, cancels a share of them before they are due, optionally kills the
node with SIGKILL at random moments and restarts it, then verifies from the target topic:
every non-cancelled message delivered (duplicates counted), none before its due time, no
cancelled one delivered, bytes and headers intact. Prints lateness p50/p99/max.

    python scripts/e2e_check.py                      # 20,000 messages over 0-5 s
    python scripts/e2e_check.py --kills 5            # with 5 SIGKILLs and restarts
    python scripts/e2e_check.py --bootstrap host:9092

Exit code 0 when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from chronos.devstack.check import add_broker_options, staged
from chronos.devstack.process import NodeProcess
from chronos.devstack.watch import Delivered, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.names import HEADER_PREFIX
from chronos.quantiles import percentile
from chronos.settings import load_settings
from proxy.client import DelayClient, DelayRequest

INGEST_THREADS = 2


@dataclass
class Expected:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    due_ms: int
    cancelled: bool = False
    acked_ms: int = 0


@dataclass
class Report:
    scheduled: int = 0
    cancelled: int = 0
    delivered_unique: int = 0
    missing: list[str] = field(default_factory=list)
    duplicates: int = 0
    early: int = 0
    cancelled_delivered: int = 0
    corrupted: int = 0
    kills: int = 0
    graceful: bool = False
    unclean_stops: int = 0
    lateness_p50_ms: int = 0
    lateness_p99_ms: int = 0
    lateness_max_ms: int = 0
    # Messages due before chronos could have stored them (due < ack of the request + 100 ms)
    # measure the proxy->Kafka->node path rather than the scheduler; reported apart.
    lateness_p99_due_after_100ms: int = 0
    lateness_max_due_after_100ms: int = 0
    # Of each duplicated message, how long before the kill that repeated it its first copy was
    # stamped: the window a crash re-delivers (docs/guarantees.md).
    duplicate_window_p99_ms: int = 0
    duplicate_window_max_ms: int = 0

    @property
    def ok(self) -> bool:
        return not (
            self.missing
            or self.early
            or self.cancelled_delivered
            or self.corrupted
            or self.unclean_stops
            or (self.graceful and self.duplicates)
        )


def _random_bytes(rng: random.Random, low: int, high: int) -> bytes:
    return rng.randbytes(rng.randint(low, high))


def _request(rng: random.Random, topic: str, max_delay_s: float) -> tuple[DelayRequest, Expected]:
    key = None if rng.random() < 0.1 else _random_bytes(rng, 0, 32)
    value = None if rng.random() < 0.02 else _random_bytes(rng, 0, 512)
    headers: list[tuple[str, bytes | None]] = [
        (f"h{i}-{rng.randint(0, 9)}", None if rng.random() < 0.1 else _random_bytes(rng, 0, 24))
        for i in range(rng.randint(0, 3))
    ]
    request = DelayRequest(
        topic,
        value,
        key=key,
        headers=headers,
        delay=rng.uniform(0, max_delay_s),
        id=uuid.uuid4().hex,
    )
    return request, Expected(key, value, headers, 0)


def _write_config(path: Path, bootstrap: str, namespace: str, data_dir: Path) -> None:
    path.write_text(
        f"""[kafka]
bootstrap_servers = "{bootstrap}"
[topics]
namespace = "{namespace}"
inner_partitions = 8
[node]
data_dir = "{data_dir}"
ingest_threads = {INGEST_THREADS}
[log]
format = "json"
"""
    )


def run_check(
    bootstrap: str,
    messages: int,
    max_delay_s: float,
    cancel_ratio: float,
    kills: int,
    seed: int,
    workdir: Path,
    schedule_over_s: float = 0.0,
    graceful: bool = False,
) -> Report:
    rng = random.Random(seed)
    namespace = f"e2e{uuid.uuid4().hex[:8]}"
    config = workdir / "chronos.toml"
    _write_config(config, bootstrap, namespace, workdir / "store")
    settings = load_settings(config)
    topic = f"{namespace}-target"
    create_topic(settings, topic, partitions=4)

    node = NodeProcess(config, workdir / "node.log")
    node.start()
    if not node.wait_ready(60):
        raise RuntimeError(f"node not ready in 60 s, see {workdir / 'node.log'}")

    deliveries: dict[str, list[Delivered]] = {}
    lock = threading.Lock()

    def on_delivered(d: Delivered) -> None:
        with lock:
            deliveries.setdefault(d.id, []).append(d)

    watcher = DeliveryWatcher(bootstrap, [topic], on_delivered).start()
    expected: dict[str, Expected] = {}
    report = Report(graceful=graceful)
    kill_ms: list[int] = []

    def killer() -> None:
        # SIGKILL (or SIGTERM, graceful) at random moments while requests are being sent and
        # delivered.
        kill_rng = random.Random(seed + 1)
        for _ in range(kills):
            time.sleep(kill_rng.uniform(0.3, 2.0))
            kill_ms.append(int(time.time() * 1000))
            if graceful:
                code = node.terminate()
                if code != 0:
                    report.unclean_stops += 1
            else:
                node.kill()
            report.kills += 1
            node.start()
            node.wait_ready(60)

    killing = threading.Thread(target=killer, name="killer", daemon=True)
    with DelayClient(settings) as client:
        client.send_delay(topic, b"warm-up", delay=0, id=f"warm-{namespace}")
        killing.start()
        pairs = [_request(rng, topic, max_delay_s) for _ in range(messages)]
        # Batches go out evenly over schedule_over_s (0: all at once, a burst).
        batch = 250
        started = time.monotonic()
        for start in range(0, messages, batch):
            pause = started + schedule_over_s * start / messages - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            chunk = pairs[start : start + batch]
            receipts = client.send_batch([r for r, _ in chunk])
            acked_ms = int(time.time() * 1000)
            for (_, exp), receipt in zip(chunk, receipts, strict=True):
                exp.due_ms = receipt.deliver_at_ms
                exp.acked_ms = acked_ms
                expected[receipt.id] = exp
            # Cancel a share of this batch among those still >= 1.5 s from due ("before due").
            now_ms = int(time.time() * 1000)
            candidates = [r.id for r, e in chunk if e.due_ms - now_ms >= 1500 and r.id]
            chosen = rng.sample(candidates, min(len(candidates), round(len(chunk) * cancel_ratio)))
            client.cancel_batch(chosen)
            for message_id in chosen:
                expected[message_id].cancelled = True
        report.scheduled = len(expected)
        report.cancelled = sum(e.cancelled for e in expected.values())

    killing.join()
    wanted = {i for i, e in expected.items() if not e.cancelled}
    deadline = time.monotonic() + max_delay_s + 60
    while time.monotonic() < deadline:
        with lock:
            if wanted <= deliveries.keys():
                break
        time.sleep(0.2)
    time.sleep(1.0)  # let stragglers (duplicates, wrongly delivered cancels) arrive
    watcher.stop()
    node.terminate()

    lateness: list[int] = []
    scheduled_ahead: list[int] = []
    windows: list[int] = []
    for message_id, exp in expected.items():
        got = deliveries.get(message_id, [])
        if exp.cancelled:
            report.cancelled_delivered += bool(got)
            continue
        if not got:
            report.missing.append(message_id)
            continue
        report.delivered_unique += 1
        report.duplicates += len(got) - 1
        if len(got) > 1:
            first = got[0].produced_ms
            kill = next((k for k in kill_ms if k >= first), None)
            if kill is not None:
                windows.append(kill - first)
        for d in got:
            user_headers = [(n, v) for n, v in d.headers if not n.startswith(HEADER_PREFIX)]
            got_fields = (d.key, d.value, user_headers, d.due_ms)
            if got_fields != (exp.key, exp.value, exp.headers, exp.due_ms):
                report.corrupted += 1
            if d.produced_ms < exp.due_ms:
                report.early += 1
        lateness.append(got[0].lateness_ms)
        if exp.due_ms >= exp.acked_ms + 100:
            scheduled_ahead.append(got[0].lateness_ms)
    if os.environ.get("E2E_DEBUG"):
        t0 = min(e.acked_ms for e in expected.values())
        worst = sorted(
            (
                (deliveries[i][0].lateness_ms, e.due_ms - t0, e.due_ms - e.acked_ms)
                for i, e in expected.items()
                if i in deliveries and not e.cancelled
            ),
            reverse=True,
        )[:40]
        print("lateness, due since start, due after ack:", worst, file=sys.stderr)
    report.duplicate_window_p99_ms = percentile(windows, 0.99)
    report.duplicate_window_max_ms = max(windows, default=0)
    report.lateness_p50_ms = percentile(lateness, 0.50)
    report.lateness_p99_ms = percentile(lateness, 0.99)
    report.lateness_max_ms = max(lateness, default=0)
    report.lateness_p99_due_after_100ms = percentile(scheduled_ahead, 0.99)
    report.lateness_max_due_after_100ms = max(scheduled_ahead, default=0)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--max-delay", type=float, default=5.0, help="seconds")
    parser.add_argument("--cancel-ratio", type=float, default=0.1)
    parser.add_argument(
        "--schedule-over",
        type=float,
        default=5.0,
        help="seconds over which the requests are sent (0: one burst)",
    )
    parser.add_argument("--kills", type=int, default=0, help="SIGKILL the node this many times")
    parser.add_argument(
        "--graceful",
        action="store_true",
        help="stop the node with SIGTERM instead of SIGKILL: a clean stop re-delivers nothing, "
        "so any duplicate fails the check",
    )
    add_broker_options(parser, default="tansu")
    parser.set_defaults(bootstrap=os.environ.get("CHRONOS_TEST_BOOTSTRAP"))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()

    with staged(args, "e2e", temporary=True) as stage:
        report = run_check(
            stage.bootstrap,
            args.messages,
            args.max_delay,
            args.cancel_ratio,
            args.kills,
            args.seed,
            stage.workdir,
            args.schedule_over,
            args.graceful,
        )
    summary = {k: v for k, v in report.__dict__.items() if k != "missing"}
    summary["missing"] = len(report.missing)
    summary["ok"] = report.ok
    summary["seed"] = args.seed
    if args.json:
        print(json.dumps(summary))
    else:
        for name, value in summary.items():
            print(f"{name:>20}: {value}")
        if report.missing:
            print("first missing ids:", report.missing[:10])
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A broker outage under load: does everything heal by itself, with nothing acknowledged lost?

Starts a local broker (Apache Kafka or Tansu) and a node process, schedules messages through
the Python client at a steady rate (delays 0..--max-delay s), freezes the broker with SIGSTOP for
--freeze seconds (sockets stay open, nothing answers: the hardest outage for clients), resumes
it, keeps sending for --after seconds, then checks from the target topic:

- lost: requests the client saw acknowledged that were never delivered;
- early: delivered before their due time;
- duplicates: delivered more than once;
- recovery: seconds from the broker's return to the first request acknowledged again and to the
  first delivery of a message scheduled after the return;
- the node process still running (no restart), and how often it logged PRODUCER_FENCED;
- what the node wrote while the broker was gone: lines, the most in one second, lines not JSON.

``--stop crash`` kills the broker instead (kill -9, Apache Kafka only) and starts it again on its
data after ``--freeze`` seconds.

    python scripts/outage_check.py --broker kafka --freeze 60
    python scripts/outage_check.py --broker tansu --freeze 60
    python scripts/outage_check.py --broker kafka --stop crash --freeze 60

The last line of output is the JSON summary. Exit code 0 when nothing acknowledged was lost,
nothing was early and both recoveries took at most --recover-within seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from chronos.bench.stack import BenchStack, TopicLayout
from chronos.devstack.brokers import BROKER_KINDS
from chronos.devstack.check import finish
from chronos.devstack.watch import Delivered, DeliveryWatcher
from chronos.errors import ChronosError
from proxy.client import DelayClient, DelayRequest

BATCH = 10  # requests per send_batch call


@dataclass
class Accepted:
    """Requests the client saw acknowledged: id -> (due ms, acknowledged at ms)."""

    due: dict[str, tuple[int, int]] = field(default_factory=dict)
    refused_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def send_load(
    client: DelayClient,
    topic: str,
    rate: float,
    max_delay_s: float,
    stop: threading.Event,
    accepted: Accepted,
) -> None:
    """``rate`` requests/s in batches of :data:`BATCH`, until ``stop``."""
    interval = BATCH / rate
    next_at = time.monotonic()
    while not stop.is_set():
        requests = [
            DelayRequest(
                topic, b"x" * 100, delay=random.uniform(0, max_delay_s), id=uuid.uuid4().hex
            )
            for _ in range(BATCH)
        ]
        try:
            receipts = client.send_batch(requests)
        except ChronosError:
            with accepted.lock:
                accepted.refused_calls += 1
        else:
            now = int(time.time() * 1000)
            with accepted.lock:
                for receipt in receipts:
                    accepted.due[receipt.id] = (receipt.deliver_at_ms, now)
        next_at += interval
        pause = next_at - time.monotonic()
        if pause > 0:
            stop.wait(pause)
        else:
            next_at = time.monotonic()  # behind (an outage): do not burst to catch up


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--broker", choices=BROKER_KINDS, default="kafka")
    parser.add_argument("--rate", type=float, default=1000.0, help="requests/s (default 1000)")
    parser.add_argument("--max-delay", type=float, default=2.0, help="seconds (default 2)")
    parser.add_argument("--warm", type=float, default=10.0, help="seconds before the freeze")
    parser.add_argument("--freeze", type=float, default=60.0, help="outage, seconds")
    parser.add_argument(
        "--stop",
        choices=["freeze", "crash"],
        default="freeze",
        help="freeze: SIGSTOP and SIGCONT; crash: kill -9 and start again on its data (Kafka)",
    )
    parser.add_argument("--after", type=float, default=30.0, help="load after it, seconds")
    parser.add_argument(
        "--recover-within", type=float, default=5.0, help="seconds allowed to recover (default 5)"
    )
    parser.add_argument(
        "--ack-timeout", type=float, default=10.0, help="client's proxy.ack_timeout_s (default 10)"
    )
    args = parser.parse_args()

    layout = TopicLayout(inner=1, target=4)
    with BenchStack(bootstrap=None, layout=layout, broker=args.broker) as stack:
        broker = stack.broker
        assert broker is not None
        stack.start_node()
        settings = stack.settings.model_copy(
            update={
                "proxy": stack.settings.proxy.model_copy(update={"ack_timeout_s": args.ack_timeout})
            }
        )
        deliveries: dict[str, list[Delivered]] = {}
        lock = threading.Lock()

        def on_delivered(delivered: Delivered) -> None:
            with lock:
                deliveries.setdefault(delivered.id, []).append(delivered)

        watcher = DeliveryWatcher(stack.bootstrap, [stack.target], on_delivered).start()
        accepted, stop = Accepted(), threading.Event()
        with DelayClient(settings) as client:
            sender = threading.Thread(
                target=send_load,
                args=(client, stack.target, args.rate, args.max_delay, stop, accepted),
                daemon=True,
            )
            sender.start()
            time.sleep(args.warm)
            node_log = stack.workdir / "node.log"
            outage_began = node_log.stat().st_size
            how = "killing (kill -9)" if args.stop == "crash" else "freezing"
            print(
                f"[outage] {how} the {args.broker} broker for {args.freeze:.0f} s", file=sys.stderr
            )
            if args.stop == "crash":
                crash, restart = getattr(broker, "crash", None), getattr(broker, "restart", None)
                if crash is None or restart is None:
                    raise SystemExit("--stop crash needs --broker kafka")
                crash()
                time.sleep(args.freeze)
                outage_ended = node_log.stat().st_size
                restart()
            else:
                broker.freeze()
                time.sleep(args.freeze)
                outage_ended = node_log.stat().st_size
                broker.thaw()
            thawed_ms = int(time.time() * 1000)
            print("[outage] broker resumed", file=sys.stderr)
            time.sleep(args.after)
            stop.set()
            sender.join(args.ack_timeout + 5)
        with accepted.lock:
            expected = dict(accepted.due)
        last_due = max((due for due, _ in expected.values()), default=0)
        deadline = time.monotonic() + max(30.0, (last_due - time.time() * 1000) / 1000 + 30)
        while time.monotonic() < deadline:
            with lock:
                if expected.keys() <= deliveries.keys():
                    break
            time.sleep(0.5)
        watcher.stop()
        node_running = stack.node.running()
        log_text = node_log.read_text(errors="replace")
        outage_log = node_log.read_bytes()[outage_began:outage_ended].decode(errors="replace")
        # Whole lines only: the ends were taken while the node was writing.
        outage_log = outage_log[outage_log.find("\n") + 1 if outage_began else 0 :]
        outage_log = outage_log[: outage_log.rfind("\n") + 1]
    summary = _summary(expected, deliveries, thawed_ms, accepted.refused_calls)
    summary.update(
        {
            "broker": args.broker,
            "freeze_s": args.freeze,
            "rate": args.rate,
            "node_still_running": node_running,
            "node_producer_fenced_logs": log_text.count("PRODUCER_FENCED"),
            "node_exited_fatal": "node_exit_fatal" in log_text,
            "stop": args.stop,
            **_log_rate(outage_log.splitlines()),
        }
    )
    ok = (
        summary["lost"] == 0
        and summary["early"] == 0
        and node_running
        and summary["accept_recovered_s"] is not None
        and summary["accept_recovered_s"] <= args.recover_within
        and summary["delivery_recovered_s"] is not None
        and summary["delivery_recovered_s"] <= args.recover_within
    )
    return finish(summary | {"ok": ok})


def _log_rate(lines: list[str]) -> dict[str, Any]:
    """How much the node wrote while the broker was gone: lines, the most in one second (by
    their timestamps) and what they said, and lines that were not JSON."""
    per_second: Counter[str] = Counter()
    said: dict[str, Counter[str]] = {}
    not_json: list[str] = []
    for line in filter(None, lines):
        try:
            event = json.loads(line)
        except ValueError:
            not_json.append(line[:200])
            continue
        second = str(event.get("timestamp", ""))[:19]
        per_second[second] += 1
        what = str(event.get("event"))
        if what == "librdkafka":
            what += f" {event.get('facility')}: {str(event.get('message'))[:60]}"
        said.setdefault(second, Counter())[what] += 1
    worst = per_second.most_common(1)
    return {
        "outage_log_lines": len(lines),
        "outage_log_lines_max_per_s": worst[0][1] if worst else 0,
        "outage_log_worst_second": dict(said[worst[0][0]].most_common(8)) if worst else {},
        "outage_log_lines_not_json": len(not_json),
        "outage_log_not_json_first": not_json[:3],
    }


def _summary(
    expected: dict[str, tuple[int, int]],
    deliveries: dict[str, list[Delivered]],
    thawed_ms: int,
    refused_calls: int,
) -> dict[str, Any]:
    lost = [i for i in expected if i not in deliveries]
    early = sum(
        1 for i, d in deliveries.items() if i in expected and d[0].produced_ms < d[0].due_ms
    )
    duplicates = sum(len(d) - 1 for d in deliveries.values() if len(d) > 1)
    after = [acked for _due, acked in expected.values() if acked >= thawed_ms]
    accept_recovered = None if not after else (min(after) - thawed_ms) / 1000
    # First delivery of a message acknowledged after the broker's return.
    fresh = [
        d[0].produced_ms
        for i, d in deliveries.items()
        if i in expected and expected[i][1] >= thawed_ms
    ]
    first_fresh = min(fresh, default=None)
    # ... and of any delivery at all once the broker was back.
    any_after = [d[0].produced_ms for d in deliveries.values() if d[0].produced_ms >= thawed_ms]
    return {
        "accepted": len(expected),
        "refused_calls": refused_calls,
        "delivered": sum(1 for i in expected if i in deliveries),
        "lost": len(lost),
        "early": early,
        "duplicates": duplicates,
        "accept_recovered_s": accept_recovered,
        "delivery_recovered_s": None if not any_after else (min(any_after) - thawed_ms) / 1000,
        "fresh_delivery_s": None if first_fresh is None else (first_fresh - thawed_ms) / 1000,
        "first_lost_ids": lost[:5],
    }


if __name__ == "__main__":
    sys.exit(main())

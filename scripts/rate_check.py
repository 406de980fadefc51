#!/usr/bin/env python3
"""A burst to a topic with a rate, while another topic flows: the rate per topic
(``delivery.topics.<t>.rate``) of a node alone or a group's master, on Apache Kafka.

Starts Apache Kafka and a node process (``--mode group``: the one replica of a group) whose
``<ns>-limited`` topic (one partition) has ``rate = --limit`` messages/s (burst: the default,
a tenth of a second's worth). Schedules ``--rate`` messages/s to another topic (due 1 s after
sending) for the whole run and ``--burst`` messages to the limited topic, all due within one
second (``--spread-ms``; 0: the same millisecond) ``--lead`` seconds ahead. Then checks:

- the limited topic: every message delivered once, never early, in due order (offsets against
  due times on its one partition), spread over ``burst / limit`` seconds (within 5 %);
- the other topic: every message once, never early; its lateness (record timestamp minus due
  time) p50/p99/max over the whole run and during the limited topic's backlog, and the worst
  second's p99.

    python scripts/rate_check.py --burst 100000 --limit 5000 --rate 2000

The last line of output is the JSON summary; exit code 0 when every check held.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import defaultdict
from typing import Any

from chronos.bench.load import LoadSpec, generate, steady_beside
from chronos.bench.stack import BenchStack
from chronos.devstack.check import finish
from chronos.devstack.watch import (
    Collected,
    Delivered,
    DeliveryWatcher,
    lateness_summary,
    waited,
)
from chronos.kafka.admin import create_topic
from chronos.quantiles import percentile

#: Delay of the other topic's messages.
DELAY_MS = 1_000
#: The span's tolerance: the issue's "over 20 s +- 5 %".
SPAN_TOLERANCE = 0.05


def run(args: argparse.Namespace) -> dict[str, Any]:
    namespace = f"rate{uuid.uuid4().hex[:8]}"
    limited = f"{namespace}-limited"
    policy = f'[delivery.topics."{limited}"]\nrate = {args.limit}\n' if args.limit else ""
    stack = BenchStack(
        bootstrap=None,
        node_settings=policy,
        broker="kafka",
        namespace=namespace,
        replicas=1 if args.mode == "group" else 0,
    )
    seen = Collected()
    with stack:
        create_topic(stack.settings, limited, 1)
        stack.start_node()
        bootstrap = stack.bootstrap
        watcher = DeliveryWatcher(bootstrap, [stack.target, limited], seen.add)
        watcher.start()
        expected_span_s = args.burst / args.limit if args.limit else 0.0
        run_s = args.lead + expected_span_s + 15
        load, loader = steady_beside(
            bootstrap, stack.inner_topic, stack.target, args.rate, run_s, DELAY_MS
        )
        due_ms = int(time.time() * 1000) + int(args.lead * 1000)
        started = time.monotonic()
        burst = LoadSpec(
            bootstrap,
            stack.inner_topic,
            limited,
            count=args.burst,
            rate=0,
            due_at_ms=due_ms,
            due_spread_ms=args.spread_ms,
            payload_bytes=100,
            prefix="l",
        )
        generate(burst)
        scheduled_s = time.monotonic() - started
        waited(lambda: len(seen.of(limited)) >= args.burst, args.lead + expected_span_s * 2 + 60)
        loader.join(run_s + 120)
        waited(lambda: len(seen.of(stack.target)) >= load.count, 60)
        time.sleep(2)  # stragglers: duplicates would arrive now
        watcher.stop()
    copies = seen.of(limited)
    ids = {d.id for d in copies}
    in_order = sorted(copies, key=lambda d: d.offset)
    out_of_order = sum(
        1 for a, b in zip(in_order, in_order[1:], strict=False) if b.due_ms < a.due_ms
    )
    sent = sorted(d.produced_ms for d in copies)
    span_s = (sent[-1] - sent[0]) / 1000 if sent else 0.0
    other = seen.of(stack.target)
    backlog = [d for d in other if sent and sent[0] <= d.due_ms <= sent[-1]]
    return {
        "mode": args.mode,
        "burst": args.burst,
        "limit": args.limit,
        "spread_ms": args.spread_ms,
        "rate": args.rate,
        "scheduled_in_s": round(scheduled_s, 2),
        "limited": {
            "delivered": len(ids),
            "lost": args.burst - len(ids & {f"l-{n}" for n in range(args.burst)}),
            "duplicates": len(copies) - len(ids),
            "early": sum(1 for d in copies if d.lateness_ms < 0),
            "out_of_order": out_of_order,
            "span_s": round(span_s, 2),
            "expected_span_s": round(expected_span_s, 2),
            "first_late_ms": sent[0] - due_ms if sent else None,
        },
        "other": dict(lateness_summary(other))
        | {
            "lost": load.count - len({d.id for d in other}),
            "duplicates": len(other) - len({d.id for d in other}),
        },
        "other_during_backlog": lateness_summary(backlog),
        # The other topic's seconds over 10 ms at p99, by due second from the burst's.
        "other_late_seconds": _late_seconds(other, due_ms),
    }


def _late_seconds(delivered: list[Delivered], origin_ms: int) -> dict[int, int]:
    by_second: dict[int, list[int]] = defaultdict(list)
    for d in delivered:
        by_second[(d.due_ms - origin_ms) // 1000].append(d.lateness_ms)
    p99 = {second: percentile(v, 0.99) for second, v in sorted(by_second.items())}
    return {second: late for second, late in p99.items() if late > 10}


def held(result: dict[str, Any]) -> bool:
    limited, other = result["limited"], result["other"]
    span_ok = not result["limit"] or abs(limited["span_s"] - limited["expected_span_s"]) <= (
        SPAN_TOLERANCE * limited["expected_span_s"]
    )
    return bool(
        span_ok
        and not (limited["lost"] or limited["duplicates"] or limited["early"])
        and not limited["out_of_order"]
        and not (other["lost"] or other["duplicates"] or other["early"])
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=100_000, help="messages to the limited topic")
    parser.add_argument(
        "--limit", type=float, default=5_000.0, help="its rate, msg/s (0: none, a baseline)"
    )
    parser.add_argument("--spread-ms", type=int, default=1_000, help="their due times span")
    parser.add_argument("--rate", type=float, default=2_000.0, help="the other topic, msg/s")
    parser.add_argument("--mode", choices=("alone", "group"), default="alone")
    parser.add_argument("--lead", type=float, default=20.0, help="seconds until the burst is due")
    args = parser.parse_args(argv)
    result = run(args)
    result["held"] = held(result)
    return finish(result | {"ok": result["held"]})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

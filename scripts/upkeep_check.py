#!/usr/bin/env python3
"""Upkeep check (issue 38, acceptance 1): does keeping the live state in Kafka make deliveries
late? On Apache Kafka, a node alone (``--replicas 0``) or a replica group (``--replicas 2``):

1. ``--pending`` messages (default 1 M) due two to three hours ahead are produced to the inner
   topic and the nodes start and ingest them (``ingest_caught_up`` from every node);
2. ``--rate`` messages a second (default 3,000) due 1-5 s ahead arrive for ``--seconds``
   (default 600), observed by a ``read_committed`` consumer when it receives them;
3. whatever the design does in the background runs inside that window: in compact mode the
   restater, expiry tombstones of every delivered id (the delete worker runs every
   ``--delete-interval`` s with as much retention, so each pass expires about
   ``rate x interval`` ids at up to ``rebuild.refresh_rate`` a second) and the broker's log
   cleaner on chronos' own topic settings; in refresh mode, passes every ``--refresh`` s.

Pass: 0 lost, 0 duplicates, 0 early, and p99 lateness at most ``--p99-ms`` (100) in every
10-second bucket of arrival. The background work done is counted from the nodes' logs.

    python scripts/upkeep_check.py --replicas 0
    python scripts/upkeep_check.py --replicas 2 --seconds 600

The last line of output is the JSON summary. Exit code 0 when it holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from chronos.bench.load import LoadSpec
from chronos.bench.scenarios import preload_pending, run_load
from chronos.bench.stack import BenchStack, TopicLayout
from chronos.bench.stats import p99_per_bucket, percentiles
from chronos.devstack.check import finish

#: Log events that are background work, counted per node over the measured window.
BACKGROUND = ("delete_pass", "refresh_pass_done")


def _node_settings(args: argparse.Namespace) -> str:
    rebuild = f'mode = "{args.mode}"\n'
    if args.mode == "refresh":
        rebuild += f"refresh_interval_s = {args.refresh}\n"
    return (
        f"\n[rebuild]\n{rebuild}"
        f"[delete]\ninterval_s = {args.delete_interval}\nretention_s = {args.delete_interval}\n"
    )


def _events(log: Path, since_ms: int, until_ms: int) -> dict[str, Any]:
    """Background events a node logged in the window; the delete passes' ids summed."""
    counted: dict[str, Any] = {name: 0 for name in BACKGROUND}
    counted["ids_expired"] = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event")
        if name not in counted:
            continue
        stamp = event.get("timestamp", "")
        at = _ms(stamp) if isinstance(stamp, str) else 0
        if since_ms <= at <= until_ms:
            counted[name] += 1
            if name == "delete_pass":
                counted["ids_expired"] += event.get("dropped", 0) + event.get(
                    "tombstones_expired", 0
                )
    return counted


def _ms(stamp: str) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def _wait_caught_up(logs: list[Path], timeout_s: float) -> float:
    """Seconds until every node logged ``ingest_caught_up`` (it read the preloaded topic)."""
    started = time.monotonic()
    while not all(p.exists() and "ingest_caught_up" in p.read_text(errors="replace") for p in logs):
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"not every node caught up in {timeout_s} s: {logs}")
        time.sleep(1.0)
    return time.monotonic() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    layout = TopicLayout(inner=args.inner_partitions, target=8)
    stack = BenchStack(
        bootstrap=None,
        node_settings=_node_settings(args),
        layout=layout,
        broker="kafka",
        replicas=args.replicas,
    )
    with stack:
        preload_pending(stack, args.pending)
        stack.start_node()
        logs = [stack.workdir / "node.log"] + [
            stack.workdir / f"backup-{n}.log" for n in range(len(stack.backups))
        ]
        caught_up_s = _wait_caught_up(logs, 900)
        print(f"every node caught up {caught_up_s:.0f} s after ready", flush=True)
        count = int(args.rate * args.seconds)
        spec = LoadSpec(
            stack.bootstrap,
            stack.inner_topic,
            stack.target,
            count,
            args.rate,
            delay_min_ms=1000,
            delay_max_ms=5000,
            prefix=f"steady-{time.time_ns()}",
        )
        since_ms = int(time.time() * 1000)
        sent, seen, node = run_load(stack, spec, args.seconds + 300, visible=True)
        until_ms = int(time.time() * 1000)
        background = {p.stem: _events(p, since_ms, until_ms) for p in logs}
        broker_log = stack.workdir / "kafka.log"
        cleanings = sum(
            "Cleaner" in line and "cleaning" in line.lower()
            for line in broker_log.read_text(errors="replace").splitlines()
        )
        if args.keep:
            keep = Path(args.keep)
            keep.mkdir(parents=True, exist_ok=True)
            for path in [*logs, broker_log]:
                shutil.copy(path, keep / path.name)
    buckets = p99_per_bucket(seen)
    stamped = p99_per_bucket(seen, stamped=True)
    first = min(buckets, default=0)
    # The first and last buckets are partial (the load ramps up and drains).
    inner = dict(list(buckets.items())[1:-1])
    worst = max(inner.values(), default=0)
    lost = count - seen.unique
    result = {
        "mode": args.mode,
        "replicas": args.replicas,
        "pending": args.pending,
        "rate": args.rate,
        "seconds": args.seconds,
        "sent_rate": round(sent["rate"], 1),
        "delivered": seen.unique,
        "lost": lost,
        "duplicates": seen.duplicates,
        "early": seen.early,
        "lateness_ms": percentiles(seen.lateness_ms),
        "worst_bucket_p99_ms": worst,
        "buckets_over": {s - first: v for s, v in inner.items() if v > args.p99_ms},
        "p99_per_10s_ms": {s - first: v for s, v in buckets.items()},
        # The same by the delivered records' timestamps (the node's producer stamped them):
        # what the node's own scheduling took, without the broker's acknowledgement and fetch.
        "stamped_lateness_ms": percentiles(seen.stamped_lateness_ms),
        "worst_stamped_bucket_p99_ms": max(list(stamped.values())[1:-1], default=0),
        "stamped_p99_per_10s_ms": {s - first: v for s, v in stamped.items()},
        "node_cpu_percent_mean": node.get("cpu_percent_mean"),
        "machine_cpu_percent": node.get("machine_cpu_percent"),
        "caught_up_s": round(caught_up_s, 1),
        "background": background,
        "broker_cleaner_lines": cleanings,
    }
    result["ok"] = lost == 0 and seen.duplicates == 0 and seen.early == 0 and worst <= args.p99_ms
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=0, help="0: a node alone")
    parser.add_argument("--mode", choices=["compact", "refresh"], default="compact")
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--delete-interval", type=float, default=60.0)
    parser.add_argument("--refresh", type=float, default=120.0, help="refresh mode's interval")
    parser.add_argument("--inner-partitions", type=int, default=4)
    parser.add_argument("--p99-ms", type=int, default=100)
    parser.add_argument("--keep", default=None, help="directory to copy the logs into")
    args = parser.parse_args()
    result = run(args)
    return finish(result)


if __name__ == "__main__":
    sys.exit(main())

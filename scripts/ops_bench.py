"""The operations API at scale: status by id, a 1,000-row listing page and the one-hour forecast
over a store holding 10 M pending messages, each asked over HTTP of a real admin API.

    python scripts/ops_bench.py [--messages 10000000] [--spread-hours 24] [--random-values]
        [--keep DIR]

The store is filled through the ledger (the ingest write path, without Kafka: what is measured
here is the reads), with due times spread evenly over ``--spread-hours`` from now, 100-byte
values and 10 topics. Then the due counts are built as a node builds them at start-up (timed),
and the admin API is served over that store. Reported: cold (first request) and warm p50 / p99
/ max of each question, and the count build time. JSON summary last.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chronos.admin.server import AdminServer  # noqa: E402
from chronos.admin.view import Check, Gauges, Report  # noqa: E402
from chronos.clock import SystemClock  # noqa: E402
from chronos.metrics import CountingMetrics  # noqa: E402
from chronos.model import DelayMessage, Op  # noqa: E402
from chronos.schedule.frontier import Frontier  # noqa: E402
from chronos.schedule.ledger import Ledger  # noqa: E402
from chronos.schedule.lookup import Lookup  # noqa: E402
from chronos.settings import DeleteSettings, StoreSettings  # noqa: E402
from chronos.store import codec  # noqa: E402
from chronos.store.rocks import RocksStore  # noqa: E402

_BATCH = 20_000


class BenchNode:
    """The admin API's view of a store with nothing else running."""

    def __init__(self, store: RocksStore, ledger: Ledger) -> None:
        self.metrics = CountingMetrics()
        self.lookup = Lookup(store, ledger)
        self.local_lookup = self.lookup
        self._store, self._ledger = store, ledger

    def health(self) -> Report:
        return Report([Check("components", True)])

    def readiness(self) -> Report:
        return Report([Check("ingest_caught_up", True)])

    def gauges(self) -> Gauges:
        now = SystemClock().now_ms()
        return Gauges("alone", 0, self._ledger.seek_ms, now, self._store.messages_estimate(), True)

    def replicas(self) -> list[dict[str, object]]:
        return []

    def policies(self) -> dict[str, object]:
        return {"configured": {}, "live": {}}


def message_id(n: int) -> str:
    """The id of message ``n``: made again when asked for, not kept (a list of 10 M ids in this
    process made Python's collector walk it: 230 ms pauses that a node does not have)."""
    return f"order-{n:09d}"


def fill(ledger: Ledger, count: int, spread_ms: int, now: int, random_values: bool) -> None:
    """``count`` pending messages due evenly over ``spread_ms`` from ``now``; 100-byte values,
    all zero (compression at its best) or each random (at its worst: the disk a store of
    incompressible payloads needs)."""
    rng = random.Random(1)
    zeros = bytes(100)
    began = time.monotonic()
    for start in range(0, count, _BATCH):
        items = []
        for n in range(start, min(start + _BATCH, count)):
            due = now + 60_000 + rng.randrange(spread_ms)
            value = rng.randbytes(100) if random_values else zeros
            message = DelayMessage(message_id(n), f"topic-{n % 10}", None, value, [], due)
            items.append((Op.ADD, message.id, due, codec.encode(message)))
        ledger.apply_decoded(items)
        if start and start % 1_000_000 == 0:
            rate = start / (time.monotonic() - began)
            print(f"filled {start:,} ({rate:,.0f}/s)", file=sys.stderr)
    ledger.sync()


def timings(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "cold_ms": round(samples[0] * 1000, 2),
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "n": len(samples),
    }


def ask(http: httpx.Client, path: str, params: dict[str, int | str] | None = None) -> float:
    began = time.perf_counter()
    answer = http.get(path, params=params)
    took = time.perf_counter() - began
    answer.raise_for_status()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--spread-hours", type=float, default=24.0)
    parser.add_argument(
        "--random-values", action="store_true", help="random 100-byte values instead of zeros"
    )
    parser.add_argument("--lookups", type=int, default=5_000)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--forecasts", type=int, default=200)
    parser.add_argument(
        "--keep", type=Path, default=None, help="store directory, kept (and reused when it exists)"
    )
    args = parser.parse_args()
    path = args.keep or Path(tempfile.mkdtemp(prefix="ops-bench-"))
    reuse = (path / "store").exists()
    store = RocksStore(path / "store", StoreSettings())
    try:
        clock = SystemClock()
        ledger = Ledger(store, Frontier(store.read_seek() or 0), clock, DeleteSettings())
        now = clock.now_ms()
        began = time.monotonic()
        if not reuse:  # a kept store of an earlier run (same --messages) is asked again
            fill(
                ledger,
                args.messages,
                int(args.spread_hours * 3_600_000),
                now,
                args.random_values,
            )
        fill_s = time.monotonic() - began
        began = time.monotonic()
        store.start_due_counts()
        assert store.due_counts.wait_ready(600)
        counts_s = time.monotonic() - began
        server = AdminServer(BenchNode(store, ledger), "127.0.0.1", 0)
        server.start()
        assert server.wait_started(10)
        rng = random.Random(2)
        report: dict[str, object] = {
            "messages": args.messages,
            "spread_hours": args.spread_hours,
            "fill_s": round(fill_s, 1),
            "due_counts_build_s": round(counts_s, 2),
        }
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http:
            status = [
                ask(http, f"/v1/messages/{message_id(rng.randrange(args.messages))}")
                for _ in range(args.lookups)
            ]
            report["status"] = timings(status)
            horizon = int(args.spread_hours * 3_600_000)
            pages = []
            for _ in range(args.pages):
                start = now + rng.randrange(horizon)
                pages.append(ask(http, "/v1/messages", {"from_ms": start, "limit": 1000}))
            report["page_1000"] = timings(pages)
            topic_pages = []
            for _ in range(args.pages):
                start = now + rng.randrange(horizon)
                params: dict[str, int | str] = {"from_ms": start, "limit": 1000, "topic": "topic-3"}
                topic_pages.append(ask(http, "/v1/messages", params))
            report["page_1000_one_topic_in_10"] = timings(topic_pages)
            forecasts = [
                ask(http, "/v1/forecast", {"horizon_s": 3600, "bucket_s": 60})
                for _ in range(args.forecasts)
            ]
            report["forecast_1h_by_minute"] = timings(forecasts)
            day = [
                ask(http, "/v1/forecast", {"horizon_s": 86_400, "bucket_s": 3600})
                for _ in range(args.forecasts)
            ]
            report["forecast_24h_by_hour"] = timings(day)
            sample = http.get("/v1/forecast", params={"horizon_s": 3600, "bucket_s": 60}).json()
            report["forecast_1h_total"] = sample["total"]
            status_of = http.get(f"/v1/messages/{message_id(0)}").json()
            assert status_of["state"] == "pending", status_of
        report["store_bytes"] = sum(f.stat().st_size for f in (path / "store").rglob("*"))
        server.stop()
        server.join(5)
        print(json.dumps(report))
    finally:
        store.close()
        if args.keep is None:
            shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

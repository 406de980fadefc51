"""Ingest rate of the store as it grows, without Kafka: the ledger alone, up to 100 M pending.

Applies N adds (200-byte payloads, due in a day at random points of an hour, ids named as the
load generator names them) through the node's `Ledger` in batches of `node.ingest_batch_max`,
and reports per tenth: records/s, the index lookup and the write in µs per record, and the
process's CPU. At the end: the store's bytes per message, RSS, the write stalls RocksDB
logged, and the time to reopen the store and find its first pending key. This isolates what
grows with the store (index lookups, compactions) from what does not (consuming and decoding,
which `scripts/hotpath_bench.py` measures); `chronos bench --only scale` measures the node as
a whole through Kafka, up to what the broker can hold in memory.

    .venv/bin/python scripts/store_ingest_bench.py [--count 10000000] [--dir PATH] [--json FILE]
        [--write-buffer-mb N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chronos.bench.host import dir_bytes
from chronos.clock import SystemClock
from chronos.model import DelayMessage
from chronos.node.interpreter import tune_interpreter
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import ChronosSettings
from chronos.store import codec
from chronos.store.rocks import RocksStore


class _Timed:
    """Wall time spent in one callable, for the per-tenth report."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn
        self.seconds = 0.0

    def __call__(self, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._fn(*args)
        finally:
            self.seconds += time.perf_counter() - started


def _write_stalls(folder: Path) -> int:
    """How often RocksDB slowed or stopped writes (its LOG says why each time)."""
    with (folder / "LOG").open(errors="replace") as log:
        return sum("Stalling writes" in line or "Stopping writes" in line for line in log)


def run(count: int, folder: Path, write_buffer_mb: int | None = None) -> dict[str, Any]:
    settings = ChronosSettings()
    if write_buffer_mb is not None:
        store_settings = settings.store.model_copy(update={"write_buffer_mb": write_buffer_mb})
        settings = settings.model_copy(update={"store": store_settings})
    store = RocksStore(folder, settings.store)
    lookups = _Timed(store.get_index_raw)
    writes = _Timed(store.write)
    store.get_index_raw = lookups  # type: ignore[method-assign,assignment]
    store.write = writes  # type: ignore[method-assign,assignment]
    ledger = Ledger(store, Frontier(0), SystemClock(), settings.delete)
    batch = settings.node.ingest_batch_max
    tenth = max(batch, count // 10 // batch * batch)
    # Rows at each tenth; a remainder shorter than a tenth joins the last row.
    report_at = {tenth * k for k in range(1, 10) if tenth * k < count} | {count}
    payload = os.urandom(200)
    due0 = int(time.time() * 1000) + 86_400_000
    rng = random.Random(7)
    prefix = f"scale-{time.time_ns()}"
    rows: list[dict[str, float]] = []
    started = mark = time.monotonic()
    cpu_mark = time.process_time()
    done = added = duplicates = 0
    while done < count:
        size = min(batch, count - done)
        adds = [
            DelayMessage(
                f"{prefix}-{i}",
                "t",
                None,
                payload,
                [("bench", b"1")],
                due0 + rng.randrange(3_600_000),
            )
            for i in range(done, done + size)
        ]
        outcome = ledger.apply(adds, {0: done + size}, [codec.encode(m) for m in adds])
        added += outcome.added
        duplicates += outcome.duplicates
        store.sync_if_due()
        done += size
        if done in report_at:
            now, cpu = time.monotonic(), time.process_time()
            n = done - (rows[-1]["applied"] if rows else 0)
            rows.append(
                {
                    "applied": done,
                    "rate": round(n / (now - mark)),
                    "lookup_us": round(lookups.seconds / n * 1e6, 2),
                    "write_us": round(writes.seconds / n * 1e6, 2),
                    "cpu_percent": round(100 * (cpu - cpu_mark) / (now - mark)),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            lookups.seconds = writes.seconds = 0.0
            mark, cpu_mark = now, cpu
    elapsed = time.monotonic() - started
    store.close()
    stalls = _write_stalls(folder)
    # The store's share of a restart: open it and find the first pending message (the node's
    # first scan starts there). Kafka's share does not grow with the store.
    reopened = time.monotonic()
    store = RocksStore(folder, settings.store)
    first_key = store.first_key_from(b"")
    reopen_s = time.monotonic() - reopened
    assert first_key is not None
    store.close()
    first, last = rows[0]["rate"], rows[-1]["rate"]
    return {
        "pending": count,
        "added": added,
        "duplicates": duplicates,
        "batch": batch,
        "write_buffer_mb": settings.store.write_buffer_mb,
        "seconds": round(elapsed, 1),
        "rate_first_tenth": first,
        "rate_last_tenth": last,
        "last_over_first": round(last / first, 2),
        "reopen_to_first_key_s": round(reopen_s, 3),
        "write_stalls_logged": stalls,
        "disk_bytes_per_message": round(dir_bytes(folder) / count, 1),
        "rss_mib_peak": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tenths": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000_000)
    parser.add_argument(
        "--dir", type=Path, default=None, help="parent of the store folder (default: temp)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument(
        "--write-buffer-mb",
        type=int,
        default=None,
        help="memtable size per column family (default: store.write_buffer_mb)",
    )
    args = parser.parse_args()
    tune_interpreter()  # the node's GC and GIL settings, as in `chronos run`
    folder = Path(tempfile.mkdtemp(prefix="store-ingest-", dir=args.dir))
    try:
        result = run(args.count, folder, args.write_buffer_mb)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "tenths"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

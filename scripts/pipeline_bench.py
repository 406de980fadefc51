"""Benchmark of the Spark pipeline: schedule N rows, then audit N scheduled + N delivered.

    .venv/bin/python scripts/pipeline_bench.py [--rows 1000000] [--master local[2]]
        [--bootstrap host:port] [--out docs/benchmarks]

Starts a local Tansu broker unless --bootstrap names one. The schedule input is a Parquet
table (200-byte values, a header, explicit ids, due times spread over ten minutes in the
past so that a node would deliver them at once). No node runs: the deliveries the audit reads
are produced by this script (one per message, 1-40 ms after due), so the audit's time is the
pipeline's alone. Writes pipeline.json and pipeline.md to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Producer

from chronos.devstack.tansu import TansuBroker
from chronos.kafka.admin import create_topic, ensure_topics
from chronos.pipeline.jobs.audit import AuditWindow, run_audit
from chronos.pipeline.jobs.schedule import run_schedule
from chronos.pipeline.session import spark_session
from chronos.settings import ChronosSettings

TOPICS = ("bench.orders", "bench.payments", "bench.retries", "bench.reminders")
WINDOW_MS = 600_000


def write_input(path: Path, rows: int, start_ms: int) -> None:
    """The schedule input, in row groups of 100k so Spark can split it across cores."""
    rng = random.Random(7)
    value = b"x" * 200
    writer = None
    for first in range(0, rows, 100_000):
        n = min(100_000, rows - first)
        ids = [f"bench-{i}" for i in range(first, first + n)]
        table = pa.table(
            {
                "id": ids,
                "topic": [TOPICS[i % len(TOPICS)] for i in range(first, first + n)],
                "key": [f"k{i}" for i in range(first, first + n)],
                "value": pa.array([value] * n, pa.binary()),
                "headers": pa.array([[("source", "bench")]] * n, pa.map_(pa.string(), pa.string())),
                "deliver_at": [start_ms + rng.randrange(WINDOW_MS) for _ in range(n)],
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


def deliver_all(bootstrap: str, path: Path) -> float:
    """Produce one delivered record per scheduled row, as a node would; returns seconds."""
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(11)
    for batch in pq.ParquetFile(path).iter_batches(batch_size=50_000):
        data = batch.to_pydict()
        for message_id, topic, key, due in zip(
            data["id"], data["topic"], data["key"], data["deliver_at"], strict=True
        ):
            headers = [
                ("source", b"bench"),
                ("chronos-id", message_id.encode()),
                ("chronos-due-ms", b"%d" % due),
                ("chronos-occurrence", b"1"),
            ]
            while True:
                try:
                    producer.produce(
                        topic,
                        b"x" * 200,
                        key.encode(),
                        headers=headers,
                        timestamp=due + rng.randint(1, 40),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("deliveries not acknowledged")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument(
        "--warm-runs",
        type=int,
        default=1,
        help="schedule the input again this many times in the same Spark session, each into a "
        "fresh namespace (shows the cost of a cold JVM; the audit reads the first run)",
    )
    args = parser.parse_args()

    with TansuBroker() if args.bootstrap is None else _Existing(args.bootstrap) as broker:
        bootstrap = broker.bootstrap
        settings = ChronosSettings.model_validate(
            {
                "kafka": {"bootstrap_servers": bootstrap},
                "topics": {"namespace": f"pb{os.getpid()}", "inner_partitions": 8},
            }
        )
        ensure_topics(settings)
        for topic in TOPICS:
            create_topic(settings, topic, 4)
        work = Path(tempfile.mkdtemp(prefix="chronos-pipeline-bench-"))
        start_ms = int(time.time() * 1000) - 2 * WINDOW_MS
        source = work / "input.parquet"
        write_input(source, args.rows, start_ms)
        t = time.monotonic()
        spark = spark_session(args.master)
        session_s = time.monotonic() - t

        schedule = run_schedule(spark, settings, str(source), str(work / "rejects.parquet"))
        print(
            f"schedule: {schedule.rows} rows in {schedule.seconds:.1f} s "
            f"= {schedule.rows_per_s:,.0f} rows/s (rejected {schedule.rejected})",
            flush=True,
        )
        warm = []
        for run in range(args.warm_runs):
            again = settings.model_copy(
                update={"topics": settings.topics.model_copy(update={"namespace": f"pbw{run}"})}
            )
            ensure_topics(again)
            warm.append(run_schedule(spark, again, str(source), str(work / f"rejects{run}")))
            print(f"schedule again (warm JVM): {warm[-1].rows_per_s:,.0f} rows/s", flush=True)
        deliver_s = deliver_all(bootstrap, source)
        print(f"synthesized {args.rows} deliveries in {deliver_s:.1f} s", flush=True)
        audit = run_audit(
            spark,
            settings,
            AuditWindow(start_ms, start_ms + WINDOW_MS),
            work / "audit",
            late_ms=1000,
        )
        print(
            f"audit: {audit.messages} messages in {audit.seconds:.1f} s: {audit.counts}", flush=True
        )
        spark.stop()

    result = {
        "run_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": sys.version.split()[0],
        "master": args.master,
        "broker": "existing " + args.bootstrap if args.bootstrap else "Tansu (local, memory)",
        "rows": args.rows,
        "spark_session_start_s": round(session_s, 1),
        "schedule": {
            "seconds": round(schedule.seconds, 1),
            "rows_per_s": round(schedule.rows_per_s),
            "warm_rows_per_s": [round(w.rows_per_s) for w in warm],
            "accepted": schedule.accepted,
            "rejected": schedule.rejected,
        },
        "audit": {
            "seconds": audit.seconds,
            "messages": audit.messages,
            "counts": audit.counts,
            "ok": audit.ok,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pipeline.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "pipeline.md").write_text(
        "# Pipeline benchmark\n\n"
        f"Run {result['run_at']} on {result['machine']}, Spark `{args.master}`, "
        f"{result['broker']}; Python {result['python']}.\n\n"
        "| job | rows | seconds | rows/s | target |\n| --- | --- | --- | --- | --- |\n"
        f"| schedule (first job of the session) | {args.rows:,} | {schedule.seconds:.1f} | "
        f"{schedule.rows_per_s:,.0f} | ≥ 50,000 rows/s |\n"
        + "".join(
            f"| schedule again (warm JVM) | {args.rows:,} | {w.seconds:.1f} | "
            f"{w.rows_per_s:,.0f} | |\n"
            for w in warm
        )
        + f"| audit | {args.rows:,} scheduled + {args.rows:,} delivered | {audit.seconds:.1f} | "
        f"{2 * args.rows / audit.seconds:,.0f} | < 120 s |\n\n"
        f"Spark session start (not in the job times): {session_s:.1f} s. "
        f"Audit verdict: {audit.counts} (ok={audit.ok}).\n"
    )
    print(json.dumps(result, indent=2))
    return 0 if audit.ok and schedule.rejected == 0 else 1


class _Existing:
    """An existing cluster, with the same context-manager shape as TansuBroker."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> _Existing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    sys.exit(main())

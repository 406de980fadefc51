"""The Spark pipeline against the real broker: sources, schedule, audit, backlog, checkpoint."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from chronos import wire
from chronos.cli.main import main as chronos_main
from chronos.kafka.admin import create_topic, ensure_topics
from chronos.model import DelayMessage
from chronos.pipeline.main import AUDIT_FOUND_PROBLEMS
from chronos.pipeline.main import main as pipeline_main
from chronos.pipeline.options import settings_to_option
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import ChronosSettings
from chronos.store.checkpoint import take_checkpoint
from proxy import DelayClient
from proxy.client import DelayRequest
from tests.broker import is_tansu
from tests.integration.harness import (
    INNER_PARTITIONS,
    Inbox,
    make_settings,
    running_node,
    wait_until,
)
from tests.member_stores import FAST, member_database

#: Record timestamps of the source test: an hour ago, inside any broker's retention. (Apache
#: Kafka deletes a segment whose newest timestamp is older than ``retention.ms``, 7 days by
#: default, at its next retention check; records stamped in 2023 vanished mid-test.)
BASE_TS_MS = (int(time.time()) - 3600) * 1000
#: Headers as these tests produce them: confluent-kafka's stub takes an invariant list of
#: str | bytes | None values.
KafkaHeaders: TypeAlias = list[tuple[str, str | bytes | None]]

# A safety net against a hang, not a bound on speed: Spark's JVM alone takes minutes on a
# loaded machine (the default 180 s passed under stress-ng, and a job cut off mid-call breaks
# the session every later Spark test shares).
pytestmark = pytest.mark.timeout(600)


def _config_file(tmp_path: Path, settings: ChronosSettings) -> Path:
    """A TOML file for the CLI with the test's broker, namespace and store."""
    path = tmp_path / "chronos.toml"
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{settings.kafka.bootstrap_servers}"\n'
        f'[topics]\nnamespace = "{settings.topics.namespace}"\ninner_partitions = 4\n'
        f'[node]\ndata_dir = "{settings.node.data_dir}"\nnode_id = "n1"\n'
    )
    return path


def _kafka_df(spark: Any, settings: ChronosSettings, topics: str, **options: str) -> Any:
    reader = (
        spark.read.format("chronos-kafka")
        .option("settings", settings_to_option(settings))
        .option("topics", topics)
    )
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_kafka_source_reads_partitions_ranges_and_chronos_headers(
    spark: Any, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}.src"
    create_topic(settings, topic, 3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3000):
        headers: KafkaHeaders = [("user", b"\x00\xff"), ("chronos-id", f"m{i}".encode())]
        if i % 2:
            headers += [("chronos-due-ms", b"%d" % (1000 + i)), ("chronos-occurrence", b"1")]
        else:
            headers.append(("chronos-due-ms", b"not-a-number"))
        producer.produce(
            topic,
            b"v%d" % i,
            b"k%d" % i,
            partition=i % 3,
            headers=headers,
            timestamp=BASE_TS_MS + i,
        )
    assert producer.flush(30) == 0

    df = _kafka_df(spark, settings, topic, maxRecordsPerSplit="300")
    rows = df.select(
        "partition",
        "offset",
        "key",
        "value",
        "headers",
        "chronos_id",
        "chronos_due_ms",
        "chronos_occurrence",
    ).collect()
    assert len(rows) == 3000
    assert len({(r["partition"], r["offset"]) for r in rows}) == 3000  # no split read twice
    by_id = {r["chronos_id"]: r for r in rows}
    assert by_id["m7"]["value"] == b"v7" and by_id["m7"]["key"] == b"k7"
    assert by_id["m7"]["chronos_due_ms"] == 1007 and by_id["m7"]["chronos_occurrence"] == 1
    assert by_id["m8"]["chronos_due_ms"] is None  # malformed header: null, not a failed job
    assert (by_id["m7"]["headers"][0]["name"], by_id["m7"]["headers"][0]["value"]) == (
        "user",
        b"\x00\xff",
    )

    ranged = _kafka_df(
        spark,
        settings,
        topic,
        startingOffsets=json.dumps({topic: {"0": 10, "1": 0, "2": 995}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": 1000}}),
    )
    assert ranged.count() == 10 + 5 + 5
    timed = _kafka_df(
        spark,
        settings,
        topic,
        startingTimestamp=str(BASE_TS_MS + 100),
        endingTimestamp=str(BASE_TS_MS + 400),
    )
    assert timed.count() == 300


def _schedule_input(path: Path, now_ms: int) -> tuple[set[str], int]:
    """Valid rows of every supported shape plus rows that break one rule each.

    Returns the ids given to valid rows and how many valid rows have no id.
    """
    rows: list[dict[str, Any]] = []
    given: set[str] = set()
    for i in range(60):
        row: dict[str, Any] = {
            "topic": "pipe-a" if i % 2 else "pipe-b",
            "value": f"v{i}",
            "key": f"k{i}",
            "headers": {"trace": f"t{i}"},
        }
        if i % 3 == 0:
            due = datetime.fromtimestamp((now_ms + 3000 + 10 * i) / 1000, tz=UTC)
            row["deliver_at"] = due.isoformat(timespec="milliseconds")
        else:
            row["delay"] = f"{3000 + 10 * i}ms"
        if i % 4 == 0:
            row["id"] = f"given-{i}"
            given.add(row["id"])
        rows.append(row)
    # A cron repeat, every 2 s of Lord Howe's wall clock (+10:30/+11), three times.
    cron = {"cron": "*/2 * * * * *", "zone": "Australia/Lord_Howe", "times": "3"}
    rows.append({"id": "cron-1", "topic": "pipe-a", "value": "c", "delay": "0s", **cron})
    bad: list[tuple[dict[str, Any], str]] = [
        ({"topic": "bad topic!", "delay": "1s"}, "topic"),
        ({"topic": "__consumer_offsets", "delay": "1s"}, "topic"),
        ({"topic": "pipe-a", "delay": "1s", "headers": {"chronos-x": "1"}}, "headers[0]"),
        ({"topic": "pipe-a", "delay": "soon"}, "delay"),
        ({"topic": "pipe-a", "deliver_at": "2026-01-01T00:00:00", "delay": None}, "deliver_at"),
        ({"topic": "pipe-a", "delay": "1s", "id": "has space"}, "id"),
        ({"topic": "pipe-a", "delay": "400d"}, "deliver_at"),
        ({"topic": None, "delay": "1s"}, "topic"),
        ({"topic": "pipe-a"}, "delay"),
        ({"topic": "pipe-a", "delay": "0s", "cron": "*/2 * * * * *"}, "times"),
    ]
    for row, _field in bad:
        rows.append(row)
    columns = ["id", "topic", "key", "value", "headers", "deliver_at", "delay", "cron", "zone"]
    columns.append("times")
    table = pa.table(
        {
            c: pa.array(
                [r.get(c) for r in rows],
                pa.map_(pa.string(), pa.string()) if c == "headers" else pa.string(),
            )
            for c in columns
        }
    )
    pq.write_table(table, path, row_group_size=20)
    return given, 60 - len(given)


def test_schedule_rejects_bad_rows_delivers_once_and_rerun_changes_nothing(
    spark: Any, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    ensure_topics(settings)
    config = _config_file(tmp_path, settings)
    source = tmp_path / "in.parquet"
    started = int(time.time() * 1000)
    given, anonymous = _schedule_input(source, started)
    rejects = tmp_path / "rejects.jsonl"
    argv = ["schedule", "--config", str(config), "--input", str(source), "--rejects", str(rejects)]

    with Inbox(settings, ["pipe-a", "pipe-b"]) as inbox, running_node(settings):
        assert pipeline_main(argv) == 0
        reasons = spark.read.json(str(rejects)).select("field", "reason").collect()
        assert sorted(r["field"] for r in reasons) == sorted(
            [
                "topic",
                "topic",
                "headers[0]",
                "delay",
                "deliver_at",
                "id",
                "deliver_at",
                "topic",
                "delay",
                "times",
            ]
        )
        assert all(r["reason"] for r in reasons)

        wait_until(lambda: len(inbox.by_id) >= 61, 60, "every row was delivered")
        wait_until(lambda: inbox.count("cron-1") >= 3, 60, "the cron repeat fired three times")
        assert len(inbox.by_id) == 61
        assert given <= inbox.by_id.keys()
        fires = sorted(d.due_ms for d in inbox.by_id["cron-1"])
        assert [f - fires[0] for f in fires] == [0, 2000, 4000] and fires[0] % 2000 == 0
        assert sum(1 for i in inbox.by_id if i.startswith("r-")) == anonymous
        delivered = inbox.first("given-0")
        assert delivered.value == b"v0" and delivered.key == b"k0"
        assert ("trace", b"t0") in delivered.headers

        assert pipeline_main(argv) == 0  # the same input again: same ids, nothing new
        # Markers due after the longest delay of the input: a row scheduled again came first.
        after_ms = int(time.time() * 1000) + 5_500
        with DelayClient(settings) as client:
            markers = inbox.settle(client, "pipe-a", INNER_PARTITIONS, deliver_at_ms=after_ms)
        counts = {i: inbox.count(i) for i in inbox.by_id if i not in markers}
        assert counts.pop("cron-1") == 3, "a re-run scheduled the cron repeat again"
        assert all(count == 1 for count in counts.values()), "a re-run delivered twice"
        assert len(inbox.by_id) == 61 + len(markers)

    out = tmp_path / "audit"
    code = pipeline_main(
        [
            "audit",
            "--config",
            str(config),
            "--from",
            str(started - 1000),
            "--to",
            str(started + 60_000),
            "--out",
            str(out),
            "--late",
            "60s",
        ]
    )
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0, summary
    # Each occurrence of the cron repeat is judged on its own; the markers are messages too.
    audited = 63 + len(markers)
    assert summary["messages"] == audited and summary["counts"]["on_time"] == audited


def _once_per_suite() -> None:
    """Jobs whose logic is Spark's over records already read (the source and schedule tests run
    on both brokers): once per suite, in the Apache Kafka pass (about 20 s of the Tansu pass)."""
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass: the job's logic is Spark's")


def test_audit_catches_loss_duplicate_early_and_late(
    spark: Any, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    _once_per_suite()
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    ensure_topics(settings)
    topic = f"{namespace}-orders"
    create_topic(settings, topic, 2)
    base = int(time.time() * 1000) - 120_000
    with DelayClient(settings) as client:
        requests = [
            DelayRequest(topic, b"x", deliver_at=base + 100 * i, id=f"o{i}") for i in range(20)
        ]
        requests.append(
            DelayRequest(
                topic,
                b"r",
                deliver_at=base,
                id="rep",
                repeat=Repeat(RepeatKind.FIXED, interval_ms=1000, times=3),
            )
        )
        requests.append(DelayRequest(topic, b"gone", deliver_at=base + 50, id="cancelled"))
        requests.append(DelayRequest(topic, b"x", deliver_at=base + 900_000, id="outside"))
        client.send_batch(requests)
        client.cancel("cancelled")

    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    # Inner records a node dead-letters: never scheduled, so never "missing" (one rule,
    # chronos.inner), and a due time beyond 64 bits must not crash the audit.
    due_text = b"%d" % (base + 500)
    refused: dict[str, KafkaHeaders] = {
        "plus": [(wire.H_DUE, b"+" + due_text)],
        "spaces": [(wire.H_DUE, b" " + due_text + b" ")],
        "underscores": [(wire.H_DUE, due_text[:4] + b"_" + due_text[4:])],
        "huge": [(wire.H_DUE, b"99999999999999999999")],
        "twice": [(wire.H_DUE, due_text), (wire.H_DUE, due_text)],
        "reserved": [(wire.H_DUE, due_text), ("chronos-trace", b"t")],
    }
    for name, extra in refused.items():
        key, value, headers = wire.encode_add(
            DelayMessage(f"refused-{name}", topic, None, b"x", [], base + 500)
        )
        kept: KafkaHeaders = [h for h in headers if h[0] != wire.H_DUE]
        producer.produce(settings.topics.names.inner, value, key, headers=kept + extra)
    producer.produce(
        topic,
        b"x",
        headers=[
            ("chronos-id", b"overflow"),
            ("chronos-due-ms", b"99999999999999999999"),
            ("chronos-occurrence", b"1"),
        ],
        timestamp=base + 600,
    )

    def deliver(message_id: str, due: int, at: int, occurrence: int = 1, skipped: int = 0) -> None:
        headers: KafkaHeaders = [
            ("chronos-id", message_id.encode()),
            ("chronos-due-ms", b"%d" % due),
            ("chronos-occurrence", b"%d" % occurrence),
        ]
        if skipped:
            headers.append(("chronos-skipped", b"%d" % skipped))
        producer.produce(topic, b"x", headers=headers, timestamp=at)

    for i in range(20):
        due = base + 100 * i
        if i == 3:
            continue  # lost
        if i == 5:
            deliver(f"o{i}", due, due - 2000)  # early
            continue
        if i == 7:
            deliver(f"o{i}", due, due + 5000)  # late
            continue
        deliver(f"o{i}", due, due + 3)
        if i == 9:
            deliver(f"o{i}", due, due + 40)  # duplicate
    deliver("rep", base + 2000, base + 2001, occurrence=3, skipped=2)  # 1 and 2 collapsed
    deliver("stranger", base + 10, base + 11)  # delivered but never scheduled
    assert producer.flush(30) == 0

    out = tmp_path / "audit"
    config = _config_file(tmp_path, settings)
    code = pipeline_main(
        [
            "audit",
            "--config",
            str(config),
            "--from",
            str(base - 1000),
            "--to",
            str(base + 60_000),
            "--out",
            str(out),
            "--late",
            "1s",
        ]
    )
    assert code == AUDIT_FOUND_PROBLEMS
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] is False
    assert summary["counts"] == {
        "on_time": 17,
        "late": 1,
        "early": 1,
        "duplicated": 1,
        "missing": 1,
        "cancelled": 1,
        "collapsed": 2,
    }
    # "overflow" has no due time a 64-bit column holds: outside every window, not unexpected.
    assert summary["messages"] == 24 and summary["unexpected_deliveries"] == 1
    details = {
        (r["id"], r["occurrence"]): r["status"]
        for r in spark.read.parquet(str(out / "details")).collect()
    }
    assert details[("o3", 1)] == "missing"
    assert details[("o5", 1)] == "early"
    assert details[("o7", 1)] == "late"
    assert details[("o9", 1)] == "duplicated"
    assert details[("cancelled", 1)] == "cancelled"
    assert [details[("rep", n)] for n in (1, 2, 3)] == ["collapsed", "collapsed", "on_time"]
    assert ("outside", 1) not in details
    assert (out / "audit.png").stat().st_size > 0


def _wait_ingested(node: Any, partitions: int, records: int, timeout_s: float = 120) -> None:
    """Until the node's store has applied ``records`` inner records."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        offsets = node.context.ledger.inner_offsets(list(range(partitions)))
        if sum(offsets.values()) >= records:
            return
        time.sleep(0.05)
    raise AssertionError(f"node did not ingest {records} records")


def test_backlog_counts_what_the_store_holds_via_a_live_checkpoint(
    spark: Any, kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    _once_per_suite()
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    config = _config_file(tmp_path, settings)
    minute = 60_000
    now = (int(time.time() * 1000) // minute + 2) * minute  # a minute boundary ahead
    expected: dict[tuple[str, int], int] = {}
    requests: list[DelayRequest] = []
    for i in range(300):
        topic = ("alpha", "beta", "gamma")[i % 3]
        due = now + (i % 7) * minute + (i * 137) % minute
        bucket = due // minute * minute
        expected[(topic, bucket)] = expected.get((topic, bucket), 0) + 1
        requests.append(DelayRequest(topic, b"p%d" % i, deliver_at=due, id=f"b{i}"))
    requests.append(
        DelayRequest(
            "alpha",
            b"rep",
            deliver_at=now + 30_000,
            id="rep",
            repeat=Repeat(RepeatKind.FIXED, interval_ms=minute, times=3),
        )
    )
    for n in range(3):
        key = ("alpha", now + n * minute)
        expected[key] = expected.get(key, 0) + 1

    with running_node(settings) as node:
        with DelayClient(settings) as client:
            client.send_batch(requests)
        _wait_ingested(node, 4, len(requests))
        checkpoint = tmp_path / "ckpt"
        assert chronos_main(["checkpoint", "--config", str(config), "--out", str(checkpoint)]) == 0

    stored = spark.read.format("chronos-checkpoint").option("path", str(checkpoint)).load()
    rows = {r["id"]: r for r in stored.collect()}
    assert len(rows) == 301
    assert rows["b5"]["value"] == b"p5" and rows["b5"]["topic"] == "gamma"
    assert rows["rep"]["repeat"] == "fixed" and rows["rep"]["repeat_times"] == 3

    out = tmp_path / "backlog"
    assert (
        pipeline_main(
            [
                "backlog",
                "--config",
                str(config),
                "--checkpoint",
                str(checkpoint),
                "--out",
                str(out),
                "--now",
                str(now),
                "--horizon",
                "10m",
            ]
        )
        == 0
    )
    counted = {
        (r["topic"], r["bucket_ms"]): r["count"]
        for r in spark.read.parquet(str(out / "backlog")).collect()
    }
    assert counted == expected
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pending"] == 303
    assert summary["peak_count"] == max(
        sum(c for (_t, b), c in expected.items() if b == bucket)
        for bucket in {b for _t, b in expected}
    )
    assert (out / "backlog.png").stat().st_size > 0


def test_a_cluster_s_backlog_reads_each_partition_from_the_member_delivering_it(
    spark: Any, tmp_path: Path
) -> None:
    """``--checkpoint`` once per member: each inner partition counted once, from the copy
    that delivered furthest (a standby's trails it). Mutants caught: only the first
    checkpoint read (8), every copy read (21)."""
    _once_per_suite()
    minute = 60_000
    now = (int(time.time() * 1000) // minute + 2) * minute
    slots = range(now + 1, now + 21)  # partition p: now + 1 + p + 4k, five each
    copies = []
    for name, seeks in (("a", {1: now + 9, 2: 0}), ("b", {1: 0, 2: now + 10, 3: 0})):
        member_database(tmp_path / name, seeks, slots).close()
        copies.append(take_checkpoint(tmp_path / name, FAST, tmp_path / f"{name}-c", 1).path)
    out = tmp_path / "backlog"
    argv = ["backlog", "--out", str(out), "--now", str(now), "--horizon", "10m"]
    for path in copies:
        argv += ["--checkpoint", str(path)]
    assert pipeline_main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    # Partition 1 from a (3 after its seek), 2 and 3 from b (3 and 5).
    assert (summary["pending"], summary["per_topic"]) == (11, {"t": 11})
    assert summary["checkpoints"] == {str(copies[0]): [1], str(copies[1]): [2, 3]}

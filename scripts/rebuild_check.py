#!/usr/bin/env python3
"""Rebuild check: replaced disks under load on Apache Kafka, after Kafka removed every record
chronos lets it remove (issue: "nothing lives on one disk alone").

A steady load (default 300 requests/s for ``--load`` s, delays 60-150 s ahead, 10 % cancelled,
2 % repeats) runs against nodes that refresh every ``--refresh`` s. Whenever a scenario says
"trim", the script waits for a rebuild floor at or above the inner topic's current end and
deletes every record below it (``DeleteRecords``: what retention does after days). Then:

* ``a``: replace the backup's disk (kill -9, delete its store, start it), wait until it says
  it is complete, trim, kill -9 the master: 0 lost, 0 duplicates, 0 early, 0 cancelled
  delivered for a ``read_committed`` consumer;
* ``b``: replace the backup's disk, wait until complete, trim, kill -9 the master and replace
  its disk too, wait until complete, trim, kill -9 the new master: the same;
* ``c``: a node alone: trim, kill -9, delete its store, start it: 0 lost, duplicates only of
  messages first delivered within ``--window`` ms before the kill (the crash window);
* ``d``: an inner topic with ``cleanup.policy=delete`` and ``retention.ms`` half the shortest
  the node takes (twice ``--refresh``: 10,000 ms at the default 10 s): the node
  must refuse to start, naming the setting.

With ``--mode compact`` (``rebuild.mode = "compact"``) the nodes keep a compacted inner topic
instead, and "trim" means: Kafka's log cleaner compacted the topic up to its end as of now, and
once more after ``delete.retention.ms`` so that the tombstones written before are gone too (the
topic rolls a segment every few seconds, so the cleaner reaches its head; the delete worker runs
every 5 s with 30 s of retention, so delivered and cancelled ids leave by expiry tombstones
during the run). Scenario ``d`` then gives the topic ``cleanup.policy=compact,delete``.

    python scripts/rebuild_check.py --scenario a
    python scripts/rebuild_check.py --scenario all
    python scripts/rebuild_check.py --scenario all --mode compact

The last line of output is the JSON summary of each scenario. Exit code 0 when all hold.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from failover_check import Group, Load, Replica, Summary, verify

from chronos.devstack.brokers import LocalBroker, start_local_broker
from chronos.devstack.check import Watched, finish
from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.watch import Collected, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.kafka.clients import KafkaClients
from chronos.kafka.topic_config import required_retention_ms
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import RebuildSettings, load_settings
from proxy.client import DelayClient

REPEAT = Repeat(RepeatKind.FIXED, interval_ms=20_000, times=3)


def _floor(settings_path: Path, group: bool) -> dict[int, int] | None:
    """The rebuild floor the group's master (or the node alone) published last."""
    settings = load_settings(settings_path)
    clients = KafkaClients(settings.kafka, "rebuild-check")
    if group:
        from chronos.group.spec import GroupSpec
        from chronos.group.status import group_status

        spec = GroupSpec.of(settings)
        assert spec is not None
        return group_status(spec, clients).rebuild_floor
    from chronos.group.published import read_published

    cut = read_published(settings, clients).cut
    return None if cut is None or cut.floor is None else cut.floor.offsets


#: Set by --trim-without-floor: delete up to the inner topic's end as of now, at once (what
#: retention removes of messages scheduled beyond it, whatever chronos published): shows
#: what a release without refresh passes loses.
TRIM_WITHOUT_FLOOR = False


#: Set by --mode compact: the broker's log directory, where the cleaner's checkpoint says how
#: far it compacted (trim then waits for compaction instead of deleting records).
COMPACTED_LOG_DIR: Path | None = None
BOOTSTRAP = ""


def trim(admin: AdminClient, settings_path: Path, group: bool, timeout_s: float = 180) -> Any:
    """Wait until a floor covers the inner topic's end as of now, then delete below it."""
    if COMPACTED_LOG_DIR is not None:
        return compact_trim(admin, BOOTSTRAP, COMPACTED_LOG_DIR, settings_path)
    settings = load_settings(settings_path)
    inner = settings.topics.names.inner
    ends = _ends(admin, inner)
    deadline = time.monotonic() + timeout_s
    floor: dict[int, int] = ends
    while not TRIM_WITHOUT_FLOOR:
        published = _floor(settings_path, group)
        if published is not None and all(published.get(p, 0) >= e for p, e in ends.items()):
            floor = published
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"no floor reached {ends} in {timeout_s} s (last: {published})")
        time.sleep(1.0)
    for future in admin.delete_records(
        [TopicPartition(inner, p, o) for p, o in floor.items()]
    ).values():
        future.result(30)
    print(f"trimmed the inner topic below {floor}")
    return floor


#: The inner topic's cleaner settings in compact mode: roll a segment every few seconds and
#: clean whatever is dirty, so that compaction reaches the topic's head during the run.
COMPACT_TOPIC = {
    "segment.ms": "3000",
    "min.cleanable.dirty.ratio": "0.01",
    "max.compaction.lag.ms": "3000",
    "delete.retention.ms": "60000",
}

#: How often (and how far behind) the delete worker expires ids in compact mode.
COMPACT_DELETE = "[delete]\ninterval_s = 5\nretention_s = 30\ntombstone_retention_s = 60\n"


def _rebuild_section(args: argparse.Namespace) -> str:
    """The nodes' [rebuild] settings; none with ``--refresh 0`` (a release without them)."""
    if args.mode == "compact":
        return f'[rebuild]\nmode = "compact"\n{COMPACT_DELETE}'
    return f"[rebuild]\nrefresh_interval_s = {args.refresh}\n" if args.refresh else ""


def _ends(admin: AdminClient, inner: str) -> dict[int, int]:
    from confluent_kafka.admin._listoffsets import OffsetSpec

    meta = admin.list_topics(inner, timeout=30).topics[inner]
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({TopicPartition(inner, p): latest for p in meta.partitions})
    return {tp.partition: f.result(30).offset for tp, f in futures.items()}


def compact_settings(admin: AdminClient, settings_path: Path) -> None:
    """Set :data:`COMPACT_TOPIC` on the inner topic the first node created."""
    from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
    from confluent_kafka.admin._resource import ResourceType

    inner = load_settings(settings_path).topics.names.inner
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in COMPACT_TOPIC.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, inner, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _cleaned(log_dir: Path, inner: str) -> dict[int, int]:
    """How far the broker's log cleaner has cleaned each partition of ``inner``."""
    path = log_dir / "cleaner-offset-checkpoint"
    found: dict[int, int] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == inner:
            found[int(parts[1])] = int(parts[2])
    return found


def _wait_cleaned(log_dir: Path, inner: str, ends: dict[int, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        cleaned = _cleaned(log_dir, inner)
        if all(cleaned.get(p, 0) >= end for p, end in ends.items() if end > 0):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cleaner did not reach {ends} in {timeout_s} s ({cleaned})")
        time.sleep(1.0)


def _records(bootstrap: str, inner: str, ends: dict[int, int]) -> int:
    """Records left in ``inner`` below ``ends`` (what a restore reads of that range)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rebuild-check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    wanted = {p: end for p, end in ends.items() if end > 0}
    consumer.assign([TopicPartition(inner, p, OFFSET_BEGINNING) for p in wanted])
    count, done = 0, set[int]()
    try:
        while len(done) < len(wanted):
            for message in consumer.consume(10_000, 1.0):
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                if message.error() is not None:
                    done.add(partition)  # end of partition
                elif offset < wanted[partition]:
                    count += 1
                else:
                    done.add(partition)
    finally:
        consumer.close()
    return count


def compact_trim(admin: AdminClient, bootstrap: str, log_dir: Path, settings_path: Path) -> Any:
    """Wait until the cleaner compacted the inner topic up to its end as of now, then once
    more after ``delete.retention.ms`` (a tombstone outlives its first cleaning that long)."""
    inner = load_settings(settings_path).topics.names.inner
    _wait_cleaned(log_dir, inner, _ends(admin, inner), 180)
    time.sleep(int(COMPACT_TOPIC["delete.retention.ms"]) / 1000 + 1)
    ends = _ends(admin, inner)
    _wait_cleaned(log_dir, inner, ends, 180)
    kept = _records(bootstrap, inner, ends)
    offsets = sum(ends.values())
    print(f"compacted the inner topic to {ends}: {kept} records left of {offsets} offsets")
    return {"ends": ends, "records_left": kept, "offsets": offsets}


def replace_disk(replica: Replica) -> None:
    replica.process.kill()
    shutil.rmtree(replica.data_dir, ignore_errors=True)
    replica.process.start()


def wait_complete(replica: Replica, since: int, timeout_s: float = 300) -> float:
    """Seconds until the replica stands for election (complete, caught up)."""
    started = time.monotonic()
    while len(replica.events("replica_eligible")) <= since:
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{replica.name} did not say it is complete in {timeout_s} s")
        time.sleep(0.2)
    return time.monotonic() - started


def run_group(
    args: argparse.Namespace, workdir: Path, bootstrap: str, admin: AdminClient
) -> dict[str, Any]:
    namespace = f"rb{uuid.uuid4().hex[:8]}"
    extra = _rebuild_section(args)
    (workdir / args.scenario).mkdir(parents=True, exist_ok=True)
    group = Group(workdir / args.scenario, bootstrap, namespace, extra=extra)
    summary = Summary(scenario=args.scenario, broker="kafka")
    facts: dict[str, Any] = {}
    try:
        first = group.start()
        config = first.config
        if args.mode == "compact":
            compact_settings(admin, config)
        topic = f"{namespace}-target"
        create_topic(load_settings(config), topic, partitions=4)
        committed, uncommitted, watchers = Watched.start(bootstrap, topic)
        with DelayClient(load_settings(config)) as client:
            load = Load(client, topic, args.rate, args.seed, (60.0, 150.0), REPEAT)
            load.start()
            time.sleep(args.load)
            facts["first_trim"] = trim(admin, config, True)
            rebuilt = []
            for round_ in range(1 if args.scenario == "a" else 2):
                master = group.master()
                backup = group.other(master)
                since = len(backup.events("replica_eligible"))
                replace_disk(backup)
                if args.refresh or args.mode == "compact":
                    facts[f"complete_after_s_{round_}"] = round(wait_complete(backup, since), 1)
                else:  # an earlier release says nothing about completeness
                    backup.process.wait_ready(300)
                rebuilt.append(backup.name)
                facts[f"trim_{round_}"] = trim(admin, config, True)
                term = master.term()
                master.process.kill()
                summary.kills += 1
                new = group.master(newer_than=term)
                print(
                    f"round {round_}: {backup.name} rebuilt, {master.name} killed, {new.name} leads"
                )
                if args.scenario == "b" and round_ == 0:
                    continue  # the killed master gets its disk replaced in the next round
                master.process.start()
            load.stop()
        last_due = max((e.due_ms for e in load.expected.values()), default=0)
        last_due += (REPEAT.times - 1) * REPEAT.interval_ms
        while time.time() * 1000 < last_due + 8000:
            time.sleep(1.0)
        for watcher in watchers:
            watcher.stop()
        verify(load, committed, uncommitted, summary)
        summary.masters_at_end = sum(r.is_master() for r in group.replicas)
        facts["rebuilt"] = rebuilt
    finally:
        for replica in group.replicas:
            if replica.process.running():
                replica.process.terminate()
    return asdict(summary) | facts | {"ok": summary.ok}


def run_alone(
    args: argparse.Namespace, workdir: Path, bootstrap: str, admin: AdminClient
) -> dict[str, Any]:
    namespace = f"rb{uuid.uuid4().hex[:8]}"
    (workdir / "c").mkdir(parents=True, exist_ok=True)
    extra = _rebuild_section(args)
    node = Replica("alone", workdir / "c", bootstrap, namespace, group=None, extra=extra)
    summary = Summary(scenario="c", broker="kafka")
    facts: dict[str, Any] = {}
    try:
        node.process.start()
        node.process.wait_ready(60)
        if args.mode == "compact":
            compact_settings(admin, node.config)
        topic = f"{namespace}-target"
        create_topic(load_settings(node.config), topic, partitions=4)
        committed, uncommitted = Collected(), Collected()
        watcher = DeliveryWatcher(bootstrap, [topic], committed.add).start()
        with DelayClient(load_settings(node.config)) as client:
            # Some due during the run, so a wiped store has delivered ones not to repeat.
            load = Load(client, topic, args.rate, args.seed, (5.0, 150.0), REPEAT)
            load.start()
            time.sleep(args.load)
            facts["trim"] = trim(admin, node.config, False)
            node.process.kill()
            killed_ms = int(time.time() * 1000)
            shutil.rmtree(node.data_dir)
            started = time.monotonic()
            node.process.start()
            node.process.wait_ready(300)
            facts["restart_ready_s"] = round(time.monotonic() - started, 1)
            time.sleep(args.load / 2)
            load.stop()
        last_due = max((e.due_ms for e in load.expected.values()), default=0)
        last_due += (REPEAT.times - 1) * REPEAT.interval_ms
        while time.time() * 1000 < last_due + 8000:
            time.sleep(1.0)
        watcher.stop()
        verify(load, committed, uncommitted, summary)
        # Duplicates are allowed only of what was first delivered in the crash window.
        outside = 0
        for deliveries in committed.by_id().values():
            by_occurrence: dict[int, list[int]] = {}
            for d in deliveries:
                by_occurrence.setdefault(d.occurrence, []).append(d.received_ms)
            for times in by_occurrence.values():
                if len(times) > 1 and min(times) < killed_ms - args.window:
                    outside += len(times) - 1
        facts["duplicates_outside_window"] = outside
        ok = not (summary.lost or summary.early or summary.cancelled_delivered or outside)
        return asdict(summary) | facts | {"ok": ok}
    finally:
        if node.process.running():
            node.process.terminate()


def run_refusal(
    args: argparse.Namespace, workdir: Path, bootstrap: str, admin: AdminClient
) -> dict[str, Any]:
    namespace = f"rb{uuid.uuid4().hex[:8]}"
    (workdir / "d").mkdir(parents=True, exist_ok=True)
    inner = f"{namespace}.inner"
    # Half the shortest retention the node takes (twice the refresh interval): 20,000 ms,
    # this scenario's value before, is exactly that shortest at the default 10 s interval,
    # and the node rightly took it (the scenario hung until its timeout).
    retention = required_retention_ms(args.refresh or RebuildSettings().refresh_interval_s) // 2
    config = {"cleanup.policy": "delete", "retention.ms": str(retention)}
    if args.mode == "compact":  # deletion by age beside compaction
        config["cleanup.policy"] = "compact,delete"
    admin.create_topics([NewTopic(inner, 1, 1, config=config)])[inner].result(30)
    extra = _rebuild_section(args)
    node = Replica("d", workdir / "d", bootstrap, namespace, group=None, extra=extra)
    result = subprocess.run(
        [sys.executable, "-m", "chronos.cli.entry", "run", "--config", str(node.config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    setting = "cleanup.policy" if args.mode == "compact" else "retention.ms"
    refused = result.returncode != 0 and setting in output
    print(output.strip().splitlines()[-1] if output.strip() else "(no output)")
    return {
        "scenario": "d",
        "exit_code": result.returncode,
        "names_setting": setting in output,
        "ok": refused,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=["a", "b", "c", "d", "all"], default="all")
    parser.add_argument("--rate", type=int, default=300, help="requests per second")
    parser.add_argument(
        "--load", type=float, default=40.0, help="seconds of load before the first trim"
    )
    parser.add_argument(
        "--refresh",
        type=float,
        default=10.0,
        help="rebuild.refresh_interval_s (0: no [rebuild] section, for an earlier release)",
    )
    parser.add_argument(
        "--mode",
        choices=["refresh", "compact"],
        default="refresh",
        help="rebuild.mode of the nodes (compact: trim waits for Kafka's log cleaner)",
    )
    parser.add_argument("--window", type=int, default=3000, help="c: crash window, ms")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--trim-without-floor",
        action="store_true",
        help="delete up to the topic's end at once instead of waiting for a published floor",
    )
    parser.add_argument("--keep", default=None, help="work directory to keep (logs, stores)")
    args = parser.parse_args()
    global TRIM_WITHOUT_FLOOR, COMPACTED_LOG_DIR, BOOTSTRAP
    TRIM_WITHOUT_FLOOR = args.trim_without_floor
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="chronos-rebuild-"))
    workdir.mkdir(parents=True, exist_ok=True)
    broker: LocalBroker
    if args.mode == "compact":
        kafka = KafkaBroker(
            log_path=workdir / "broker.log", properties={"log.cleaner.backoff.ms": "2000"}
        ).start()
        COMPACTED_LOG_DIR, BOOTSTRAP, broker = kafka.data_dir, kafka.bootstrap, kafka
    else:
        broker = start_local_broker("kafka", workdir / "broker.log")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    results = []
    try:
        for scenario in ["a", "b", "c", "d"] if args.scenario == "all" else [args.scenario]:
            args.scenario = scenario
            if scenario in ("a", "b"):
                results.append(run_group(args, workdir, broker.bootstrap, admin))
            elif scenario == "c":
                results.append(run_alone(args, workdir, broker.bootstrap, admin))
            else:
                results.append(run_refusal(args, workdir, broker.bootstrap, admin))
            print(json.dumps(results[-1]))
    finally:
        broker.stop()
    return finish({"ok": all(r["ok"] for r in results), "scenarios": results}, workdir)


if __name__ == "__main__":
    sys.exit(main())

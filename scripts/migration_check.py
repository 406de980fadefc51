#!/usr/bin/env python3
"""Migration check (issue 38): a store and inner topic written by an earlier release in refresh
mode, moved to compact mode by this one (``chronos topics migrate``), on Apache Kafka.

1. The release ``--from`` (default 6c46988, the release the issue was filed against) runs as a
   node alone in refresh mode, forgetting delivered messages after 1 s. It receives
   ``--messages`` adds due an hour ahead: of them 10 % cancelled, 10 % rescheduled, 10 % with a
   null payload, 10 % re-sent (the first add wins), plus 10 % more cancelled before their add,
   and as many due at once (delivered, then forgotten).
2. Stopped, its store is read by this release (every id's state), and the migration runs.
3. What a cleaner keeps of the topic (each id's last record unless its value is null) must state
   exactly the held state: every held id once, in its own partition, each forgotten id gone.
4. This release, in compact mode, restores a wiped store from the topic: the same states; a new
   message is delivered; nothing forgotten is delivered again.

    python scripts/migration_check.py
    python scripts/migration_check.py --from a3263cc --messages 5000

The last line of output is the JSON summary. Exit code 0 when it holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from chronos import wire
from chronos.bench.revision import install
from chronos.clock import SystemClock
from chronos.devstack.brokers import start_local_broker
from chronos.devstack.check import finish
from chronos.devstack.process import NodeProcess
from chronos.devstack.watch import Delivered, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.kafka.partitioner import partition_of
from chronos.runtime.migration import migrate_to_compact
from chronos.schedule import restatement
from chronos.settings import load_settings
from chronos.store import codec
from chronos.store.rocks import RocksStore
from proxy.client import DelayClient

REPO = Path(__file__).resolve().parents[1]
HOUR_S = 3600.0
PARTITIONS = 4


def _config(path: Path, bootstrap: str, namespace: str, store: Path, mode: str) -> Path:
    path.write_text(
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\n'
        f'[topics]\nnamespace = "{namespace}"\ninner_partitions = {PARTITIONS}\n'
        f'[node]\nnode_id = "n1"\ndata_dir = "{store}"\n'
        f"[delete]\nretention_s = 1.0\ninterval_s = 0.5\n"
        + (f'[rebuild]\nmode = "{mode}"\n' if mode == "compact" else "")
        + '[log]\nformat = "json"\n'
    )
    return path


def _states(store_dir: Path, ids: list[str]) -> dict[str, Any]:
    """What the store at ``store_dir`` holds for each id (None: nothing)."""
    settings = load_settings(None)
    store = RocksStore(store_dir, settings.store)
    try:
        return {i: restatement.current(store, i, None) for i in ids}
    finally:
        store.close()


def _last_records(bootstrap: str, topic: str) -> dict[str, list[tuple[int, Any, Any]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "migration-check",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    found: dict[str, list[tuple[int, Any, Any]]] = {}
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < len(ends):
            for record in consumer.consume(1000, 1.0):
                partition, offset, key = record.partition(), record.offset(), record.key()
                if record.error() is not None or key is None or partition is None:
                    continue
                found.setdefault(key.decode(), []).append(
                    (partition, record.value(), dict(record.headers() or []))
                )
                if offset is not None and offset + 1 >= ends[partition]:
                    done.add(partition)
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
    finally:
        consumer.close()
    return found


def _stated(record: tuple[int, Any, Any], held: restatement.Restatement) -> bool:
    """Whether a kept record states what the store held."""
    _, value, headers = record
    if held.is_cancel:
        return bool(headers.get(wire.H_CANCELLED) == str(held.cancelled_ms).encode())
    assert held.value is not None
    message = codec.decode(held.value)
    payload = b"" if message.value is None else message.value
    return bool(headers.get(wire.H_SLOT) == str(held.slot_ms).encode() and value == payload)


def _passed(log: Path, cutoff_ms: int) -> bool:
    """Whether the node logged a delete pass whose cutoff is past ``cutoff_ms``."""
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "delete_pass" and event.get("cutoff_ms", 0) > cutoff_ms:
            return True
    return False


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def run(args: argparse.Namespace) -> dict[str, Any]:
    revision = install(args.from_ref, REPO, lambda line: print(line, flush=True))
    work = Path(tempfile.mkdtemp(prefix="chronos-migration-"))
    broker = start_local_broker("kafka", work / "kafka.log")
    namespace = f"mig{uuid.uuid4().hex[:8]}"
    store = work / "store"
    try:
        refresh_toml = _config(work / "refresh.toml", broker.bootstrap, namespace, store, "refresh")
        compact_toml = _config(work / "compact.toml", broker.bootstrap, namespace, store, "compact")
        refresh = load_settings(refresh_toml)
        compact = load_settings(compact_toml)
        target = f"{namespace}-target"
        create_topic(refresh, target, 2)
        old = NodeProcess(refresh_toml, work / "old.log", command=revision.command)
        old.start()
        if not old.wait_ready(120):
            raise RuntimeError(f"{revision.label} did not start, see {work / 'old.log'}")
        n = args.messages
        tenth = max(1, n // 10)
        pending = [f"p{i}" for i in range(n)]
        early_cancels = [f"c{i}" for i in range(tenth)]
        quick = [f"q{i}" for i in range(n)]
        delivered: Counter[str] = Counter()
        lock = threading.Lock()

        def seen(d: Delivered) -> None:
            with lock:
                delivered[d.id] += 1

        watcher = DeliveryWatcher(broker.bootstrap, [target], seen).start()
        with DelayClient(refresh) as client:
            for i in early_cancels:
                client.cancel(i)
            for k, i in enumerate(pending):
                value = None if k % 10 == 3 else f"v{k}".encode()
                client.send_delay(target, value, delay=HOUR_S, id=i)
            for i in pending[1::10]:
                client.cancel(i)
            for i in pending[2::10]:
                client.reschedule(i, delay=2 * HOUR_S)
            for i in pending[4::10]:
                client.send_delay(target, b"again", delay=2 * HOUR_S, id=i)
            for i in early_cancels:
                client.send_delay(target, b"never", delay=0.5, id=i)
            for i in quick:
                client.send_delay(target, b"q", delay=0.2, id=i)
        _wait(lambda: all(delivered[i] for i in quick), 120, "the quick messages delivered")
        ids = pending + early_cancels + quick
        # Every quick one sits at a slot before now: forgotten by a delete pass past it.
        now_ms = int(time.time() * 1000)
        _wait(lambda: _passed(work / "old.log", now_ms), 60, "a delete pass past them")
        old.terminate()
        held = _states(store, ids)
        forgotten = sorted(i for i in quick if held[i] is None)
        if len(forgotten) != len(quick):
            raise RuntimeError(f"{len(quick) - len(forgotten)} quick messages not forgotten")

        migrated = migrate_to_compact(compact, SystemClock())
        print(f"migrated: {migrated}", flush=True)

        kept = {
            i: rs[-1]
            for i, rs in _last_records(broker.bootstrap, compact.topics.names.inner).items()
            if rs[-1][1] is not None
        }
        live = {i: s for i, s in held.items() if s is not None}
        wrong_set = sorted(set(kept) ^ set(live))
        misstated = sorted(i for i in live if i in kept and not _stated(kept[i], live[i]))
        misplaced = sorted(i for i in kept if kept[i][0] != partition_of(i.encode(), PARTITIONS))

        shutil.rmtree(store)
        new = NodeProcess(compact_toml, work / "new.log")
        new.start()
        if not new.wait_ready(120):
            raise RuntimeError(f"this release did not restore, see {work / 'new.log'}")
        with DelayClient(compact) as client:
            client.send_delay(target, b"after", delay=0.2, id="after")
        _wait(lambda: delivered["after"] == 1, 60, "a new message delivered")
        new.terminate()
        watcher.stop()
        restored = _states(store, ids)
        differ = sorted(i for i in ids if restored[i] != held[i])
        again = sorted(i for i in quick + early_cancels if delivered[i] != (1 if i in quick else 0))
        result: dict[str, Any] = {
            "from": revision.label,
            "ids": len(ids),
            "held": len(live),
            "forgotten": len(forgotten),
            "records_read": migrated.records_read,
            "restated_messages": migrated.messages,
            "restated_cancels": migrated.cancels,
            "tombstones": migrated.tombstones,
            "topic_changes": migrated.topic_changes,
            "kept_not_held_or_held_not_kept": wrong_set[:10],
            "misstated": misstated[:10],
            "misplaced": misplaced[:10],
            "restored_differ": differ[:10],
            "delivered_wrongly": again[:10],
        }
        result["ok"] = not (wrong_set or misstated or misplaced or differ or again)
        if result["ok"]:
            shutil.rmtree(work, ignore_errors=True)
        else:
            result["logs"] = str(work)
        return result
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--from", dest="from_ref", default="6c46988")
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    result = run(args)
    return finish(result)


if __name__ == "__main__":
    sys.exit(main())

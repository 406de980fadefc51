#!/usr/bin/env python3
"""A full disk under load, then freed: does delivery resume by itself, with nothing lost?

Needs root (it mounts a small tmpfs as the node's store directory). Starts a broker and a node
process (``store.min_free_mb`` = ``--reserve-mb``), sends a steady load, fills the store's file
system, keeps it full until the node logs that it stopped writing (plus ``--hold`` s), frees the
space, and measures:

- ``--fill reserve``: down to half the reserve, as a disk filling up over time does (the node
  stops writing before RocksDB meets the full disk); ``--fill zero``: until the file system
  refuses a write, at once (RocksDB may meet it: then its own recovery, every 5 s, bounds the
  resume);
- paused, delivery_paused: the node said so (``ingest_paused``, and ``delivery_paused`` once
  the cancel gate held a due message 5 s);
- resumed_after_ms: from freeing the space to the node's ``ingest_resumed`` log line;
- delivered_after_ms: from freeing the space to the first record delivered afterwards (its
  producer timestamp);
- lost, duplicates, early (a ``read_committed`` consumer, after everything fell due);
- restarts: 0 (the node must not need one).

    sudo python scripts/full_disk_check.py

The last line is the JSON summary; exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from failover_check import Replica, _epoch_ms

from chronos.devstack.check import Tally, add_broker_options, finish, staged
from chronos.devstack.watch import Collected, DeliveryWatcher
from chronos.kafka.admin import create_topic
from chronos.settings import load_settings
from proxy.client import DelayClient, DelayRequest


@dataclass
class Summary(Tally):
    fill: str = "reserve"
    scheduled: int = 0
    paused: bool = False
    #: The push worker said delivery waits (``delivery_paused``): the cancel gate holds due
    #: messages once ingest stopped.
    delivery_paused: bool = False
    rocksdb_met_full_disk: bool = False
    resumed_after_ms: int | None = None
    delivered_after_ms: int | None = None
    node_running: bool = False

    @property
    def ok(self) -> bool:
        resumed = self.delivered_after_ms is not None and self.delivered_after_ms <= 1000
        told = self.paused and self.delivery_paused
        return told and resumed and self.exact and self.node_running


class Load:
    """``rate`` requests a second, due 1-3 s after they are sent, until stopped."""

    def __init__(self, client: DelayClient, topic: str, rate: int) -> None:
        self.client, self.topic, self.rate = client, topic, rate
        self.due: dict[str, int] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        per_tick = max(1, self.rate // 10)
        while not self._stop.wait(0.1):
            batch = [
                DelayRequest(self.topic, b"v", delay=1.0 + 2.0 * i / per_tick)
                for i in range(per_tick)
            ]
            try:
                for receipt in self.client.send_batch(batch):
                    self.due[receipt.id] = receipt.deliver_at_ms
            except Exception:  # the broker is fine here; count and go on
                self.errors += 1


def _fill(path: Path, leave_bytes: int) -> None:
    """Write zeros into ``path`` until at most ``leave_bytes`` are free (0: until refused)."""
    chunk = b"\0" * (1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            stats = os.statvfs(path)
            free = stats.f_bavail * stats.f_frsize
            if leave_bytes and free <= leave_bytes:
                return
            os.write(fd, chunk[: max(4096, min(len(chunk), free - leave_bytes))])
    except OSError:
        return  # full
    finally:
        os.close(fd)


def run(args: argparse.Namespace, bootstrap: str, workdir: Path, summary: Summary) -> None:
    namespace = f"fd{uuid.uuid4().hex[:8]}"
    node = Replica("alone", workdir, bootstrap, namespace, group=None)
    node.data_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={args.size_mb}m", "tmpfs", str(node.data_dir)],
        check=True,
    )
    filler = node.data_dir / "filler"
    try:
        node.process.start()
        if not node.process.wait_ready(120):
            raise SystemExit(f"the node did not start: see {node.log_path}")
        settings = load_settings(node.config)
        topic = f"{namespace}-target"
        create_topic(settings, topic, partitions=4)
        seen = Collected()
        watcher = DeliveryWatcher(bootstrap, [topic], seen.add).start()
        with DelayClient(settings) as client:
            load = Load(client, topic, args.rate)
            load.start()
            time.sleep(5.0)
            _fill(filler, 0 if args.fill == "zero" else (args.reserve_mb << 20) // 2)
            deadline = time.monotonic() + 60
            while not node.events("ingest_paused") and time.monotonic() < deadline:
                time.sleep(0.1)
            summary.paused = bool(node.events("ingest_paused"))
            time.sleep(args.hold)
            freed_ms = int(time.time() * 1000)
            filler.unlink()
            time.sleep(10.0)
            load.stop()
        last_due = max(load.due.values(), default=0)
        while time.time() * 1000 < last_due + 10_000:
            time.sleep(0.5)
        watcher.stop()
        summary.node_running = node.process.running()
        summary.delivery_paused = bool(node.events("delivery_paused"))
        summary.rocksdb_met_full_disk = any(
            "RocksDB met a full disk" in str(e.get("reason")) for e in node.events("ingest_paused")
        ) or bool(node.events("component_step_failed"))
        resumed = [e for e in node.events("ingest_resumed") if _epoch_ms(e) >= freed_ms]
        if resumed:
            summary.resumed_after_ms = _epoch_ms(resumed[0]) - freed_ms
        after = [d.produced_ms for ds in seen.by_id().values() for d in ds]
        after = [t for t in after if t >= freed_ms]
        if after:
            summary.delivered_after_ms = min(after) - freed_ms
        summary.scheduled = len(load.due)
        summary.count(load.due, seen)
    finally:
        if node.process.running():
            node.process.terminate()
        filler.unlink(missing_ok=True)
        subprocess.run(["umount", "-l", str(node.data_dir)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=500, help="requests per second")
    parser.add_argument("--size-mb", type=int, default=256, help="size of the store's tmpfs")
    parser.add_argument("--reserve-mb", type=int, default=32, help="store.min_free_mb")
    parser.add_argument("--fill", choices=["reserve", "zero"], default="reserve")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds full after the pause")
    add_broker_options(parser)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("full_disk_check mounts a tmpfs: run it as root")
    os.environ["CHRONOS_STORE__MIN_FREE_MB"] = str(args.reserve_mb)
    summary = Summary(fill=args.fill)
    with staged(args, "full-disk") as stage:
        run(args, stage.bootstrap, stage.workdir, summary)
    return finish(summary, stage.workdir)


if __name__ == "__main__":
    sys.exit(main())

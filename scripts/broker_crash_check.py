#!/usr/bin/env python3
"""Apache Kafka killed with ``kill -9`` and restarted under load, with a replica group of two.

Starts a single-node Apache Kafka, a group of two replicas (processes) and the load of
``scripts/failover_check.py`` (steady requests, 10 % cancelled 1.5 s or more before due, 2 %
repeats), then ``--crashes`` times: ``kill -9`` the broker, keep it down ``--down`` s, start it
again on its data (log recovery runs) and measure from the moment it answers again to the first
delivery a ``read_committed`` consumer sees. Afterwards every expected delivery must have been
seen exactly once (repeats: every occurrence, none collapsed), none early, no cancelled one.

    python scripts/broker_crash_check.py --crashes 3

The last line is the JSON summary; exit code 0 when every check holds.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from failover_check import REPEAT, Group, Load, Summary, _flowing_again, drain, verify

from chronos.devstack.check import Watched, finish
from chronos.devstack.kafka import KafkaBroker
from chronos.kafka.admin import create_topic
from chronos.repeat import Repeat, RepeatKind
from chronos.settings import load_settings
from proxy.client import DelayClient


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--crashes", type=int, default=3)
    parser.add_argument("--down", type=float, default=5.0, help="seconds the broker stays dead")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between crashes")
    parser.add_argument("--rate", type=int, default=1000, help="requests per second")
    parser.add_argument("--repeat-interval", type=float, default=2.0, help="seconds")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", default=None, help="work directory to keep (logs, stores)")
    args = parser.parse_args()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="chronos-broker-crash-"))
    workdir.mkdir(parents=True, exist_ok=True)
    broker = KafkaBroker(log_path=workdir / "broker.log").start()
    summary = Summary(scenario="broker-crash", broker="kafka")
    answered_after: list[int] = []
    namespace = f"bc{uuid.uuid4().hex[:8]}"
    group = Group(workdir, broker.bootstrap, namespace)
    repeat = Repeat(RepeatKind.FIXED, int(args.repeat_interval * 1000), REPEAT.times)
    try:
        group.start()
        settings = load_settings(group.replicas[0].config)
        topic = f"{namespace}-target"
        create_topic(settings, topic, partitions=4)
        committed, uncommitted, watchers = Watched.start(broker.bootstrap, topic)
        with DelayClient(settings) as client:
            load = Load(client, topic, args.rate, args.seed, repeat=repeat)
            load.start()
            try:
                for _ in range(args.crashes):
                    time.sleep(args.interval)
                    broker.crash()
                    print(f"broker killed; down for {args.down} s", flush=True)
                    time.sleep(args.down)
                    started = time.monotonic()
                    broker.restart(timeout_s=120)
                    answered_ms = int(time.time() * 1000)
                    answered_after.append(int((time.monotonic() - started) * 1000))
                    again = _flowing_again(answered_ms, committed)
                    summary.failover_ms.append(-1 if again is None else again)
                    print(f"broker answers again; deliveries after {again} ms", flush=True)
                time.sleep(args.interval)
            finally:
                load.stop()
        drain(load, watchers, straggle_ms=10_000)
        summary.masters_at_end = sum(r.is_master() for r in group.replicas)
        if summary.masters_at_end != 1:
            summary.problems.append(f"{summary.masters_at_end} masters at the end")
        if load.errors:
            print(f"load errors: {len(load.errors)}, first: {load.errors[0]}")
        verify(load, committed, uncommitted, summary)
        if summary.repeat_occurrences_collapsed:
            summary.problems.append(f"{summary.repeat_occurrences_collapsed} occurrences collapsed")
        if any(ms < 0 or ms > 3000 for ms in summary.failover_ms):
            summary.problems.append("deliveries not within 3 s of the broker answering again")
    finally:
        for replica in group.replicas:
            if replica.process.running():
                replica.process.signal(signal.SIGCONT)
                replica.process.terminate()
        broker.stop()
    out = asdict(summary) | {"broker_restart_ms": answered_after, "ok": summary.ok}
    out["deliveries_after_broker_answers_ms"] = out.pop("failover_ms")
    return finish(out, workdir)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Measure the CPU an idle node uses: nothing due for an hour, the node just waits.

Starts a local Tansu broker (or uses --bootstrap), a `chronos run` subprocess with one message
due in an hour, lets it settle, then reads the node process's CPU time (user + system, from
/proc, its decoder child processes included) over --seconds and prints the share of one core.
The broker's own CPU is not counted.

    python scripts/idle_cpu.py --seconds 60
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from chronos.bench.sampler import cpu_seconds, stage_delta, thread_cpu
from chronos.devstack.tansu import TansuBroker
from chronos.settings import load_settings
from proxy.client import DelayClient


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    broker = None if args.bootstrap else TansuBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory(prefix="chronos-idle-") as tmp:
        config = Path(tmp) / "chronos.toml"
        config.write_text(
            f'[kafka]\nbootstrap_servers = "{bootstrap}"\n'
            f'[topics]\nnamespace = "idle{uuid.uuid4().hex[:6]}"\n'
            f'[node]\ndata_dir = "{tmp}/store"\n'
        )
        node = subprocess.Popen(
            [sys.executable, "-m", "chronos.cli.entry", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with DelayClient(load_settings(config)) as client:
                client.send_delay("idle-target", b"later", delay=3600)
            time.sleep(args.settle)
            threads = thread_cpu(node.pid)
            start_cpu, start = cpu_seconds(node.pid), time.monotonic()
            time.sleep(args.seconds)
            used = cpu_seconds(node.pid) - start_cpu
            stages = stage_delta(threads, thread_cpu(node.pid))
            elapsed = time.monotonic() - start
        finally:
            node.terminate()
            node.wait(30)
            if broker is not None:
                broker.stop()
    print(
        f"idle node: {used:.2f} CPU s in {elapsed:.1f} s = {100 * used / elapsed:.2f} % of one core"
    )
    # Where it goes, % of one core per stage (threads by name, the decoder child's apart).
    print("per stage:", {stage: round(100 * cpu / elapsed, 2) for stage, cpu in stages.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

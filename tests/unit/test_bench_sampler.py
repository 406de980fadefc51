"""The benchmark counts a process's children as its own: a node decodes in child processes."""

from __future__ import annotations

import subprocess
import sys
import time

from chronos.bench.sampler import cpu_seconds, process_tree, rss_bytes

# A parent that only waits for a child that burns CPU and holds ~64 MiB.
_PARENT = (
    "import subprocess, sys; subprocess.run([sys.executable, '-c', "
    "'import time; b = bytearray(64 << 20); t = time.time() + 3\\nwhile time.time() < t: pass'])"
)


def test_children_cpu_and_memory_count_for_their_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT])
    try:
        deadline = time.monotonic() + 10
        while len(process_tree(parent.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = process_tree(parent.pid)
        assert len(tree) == 2 and tree[0] == parent.pid
        start = cpu_seconds(parent.pid)
        time.sleep(1.0)
        # The parent itself sleeps in wait(): the CPU is the child's, counted for the parent.
        assert cpu_seconds(parent.pid) - start > 0.3
        assert rss_bytes(parent.pid) > 64 << 20
    finally:
        parent.kill()
        parent.wait()

"""The benchmark counts a process's children as its own: a node decodes in child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from chronos.bench.sampler import cpu_seconds, process_tree, rss_bytes

# A parent that only waits for its child; the child takes 64 MiB, burns 0.5 s of CPU, says so
# and sleeps (so it is still there to be counted).
_CHILD = (
    "import sys, time; b = bytearray(64 << 20)\n"
    "while time.process_time() < 0.5: pass\n"
    "print('burnt', flush=True); time.sleep(60)"
)
_PARENT = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {_CHILD!r}])"


def test_children_cpu_and_memory_count_for_their_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"burnt\n"
        tree = process_tree(parent.pid)
        assert len(tree) == 2 and tree[0] == parent.pid
        # The parent itself only waited: the CPU is its child's, counted for the parent.
        assert cpu_seconds(parent.pid) >= 0.5
        assert rss_bytes(parent.pid) > 64 << 20
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the child too
        parent.wait()

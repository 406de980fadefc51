"""The benchmark counts a process's children as its own: a node decodes in child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from chronos.bench.sampler import (
    cpu_seconds,
    process_tree,
    rss_bytes,
    stage_delta,
    stage_of,
    thread_cpu,
)
from chronos.threadname import name_this_thread

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


# A parent whose thread, named by chronos.threadname, burns 0.4 s, and whose child burns 0.3 s.
_NAMED = (
    "import subprocess, sys, threading, time\n"
    "from chronos.threadname import name_this_thread\n"
    "def burn():\n"
    "    name_this_thread('sender-1')\n"
    "    t = time.thread_time()\n"
    "    while time.thread_time() - t < 0.4: pass\n"
    "worker = threading.Thread(target=burn); worker.start(); worker.join()\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import time\\nwhile time.process_time() < 0.3: pass\\nprint(1, flush=True)\\n"
    "time.sleep(60)'], stdout=subprocess.PIPE)\n"
    "child.stdout.readline(); print('burnt', flush=True); time.sleep(60)\n"
)


def test_thread_cpu_counts_each_named_stage_and_the_children_apart() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _NAMED], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"burnt\n"
        # The burning thread has ended: its CPU is in the process, not in a live thread.
        stages = stage_delta({}, thread_cpu(process.pid))
        assert "sender" not in stages
        assert sum(v for k, v in stages.items() if k.startswith("decoder/")) >= 0.25
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_named_thread_is_its_stage_while_it_lives() -> None:
    burnt, done = threading.Event(), threading.Event()

    def burn() -> None:
        assert name_this_thread("sender-0")
        started = time.thread_time()
        while time.thread_time() - started < 0.3:
            pass
        burnt.set()
        done.wait(30)

    before = thread_cpu(os.getpid())
    worker = threading.Thread(target=burn)
    worker.start()
    try:
        assert burnt.wait(30)
        spent = stage_delta(before, thread_cpu(os.getpid()))
        assert spent.get("sender", 0.0) >= 0.25
        assert list(spent)[0] == "sender"  # largest first
    finally:
        done.set()
        worker.join()


def test_a_thread_that_ended_takes_nothing_from_the_others_of_its_stage() -> None:
    before = {("sender", 1): 5.0, ("sender", 2): 1.0}
    after = {("sender", 2): 1.5, ("sender", 3): 0.25}  # 1 ended, 3 started
    assert stage_delta(before, after) == {"sender": 0.75}


def test_stages_group_numbered_threads_and_libraries() -> None:
    assert stage_of("sender-0\n", False) == "sender"
    assert stage_of("ingest-12", False) == "ingest"
    assert stage_of("rdk:broker3", False) == "rdk"
    assert stage_of("rocksdb:low0", False) == "rocksdb"
    assert stage_of("push", False) == "push"
    assert stage_of("decoder", True) == "decoder/decoder"
    assert stage_of("rdk:main", True) == "decoder/rdk"

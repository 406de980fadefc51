"""CPU and memory of a process and its children over time, read from /proc (Linux).

Children count: a node decodes in child processes (``node.ingest_decoder``), and their CPU
and memory are the node's.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants alive now."""
    tree = [pid]
    for member in tree:  # grows while walked: breadth first
        for task in Path(f"/proc/{member}/task").glob("*/children"):
            try:
                tree += [int(child) for child in task.read_text().split()]
            except OSError:  # the thread or process ended meanwhile
                continue
    return tree


def _own_cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid``, with that of the children it waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / _TICKS


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (all threads).

    Live descendants are read directly; one that ended counts once its parent waited for it
    (a node joins the decoder processes it stops).
    """
    total = _own_cpu_seconds(pid)
    for member in process_tree(pid)[1:]:
        try:
            total += _own_cpu_seconds(member)
        except OSError:
            continue
    return total


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` plus that of its live descendants."""
    total = 0
    for member in process_tree(pid):
        try:
            total += int(Path(f"/proc/{member}/statm").read_text().split()[1]) * _PAGE
        except OSError:
            if member == pid:
                raise
    return total


def stage_of(comm: str, child: bool) -> str:
    """The stage a thread's OS name stands for: numbered threads of one kind together
    (``sender-0``/``sender-1``: ``sender``, ``rdk:broker3``: ``rdk``, ``rocksdb:low0``:
    ``rocksdb``), a child process' threads under ``decoder/`` (the node's only children)."""
    kind = comm.strip().split(":", 1)[0] if ":" in comm else comm.strip().rstrip("0123456789-")
    return f"decoder/{kind}" if child else kind


#: CPU seconds per live thread: (stage, thread id) -> seconds.
ThreadCpu = dict[tuple[str, int], float]


def thread_cpu(pid: int) -> ThreadCpu:
    """CPU seconds of every thread alive now in ``pid`` and its descendants, by stage
    (``stage_of``) and thread id: a node names its threads (``chronos.threadname``)."""
    threads: ThreadCpu = {}
    for member in process_tree(pid):
        for task in Path(f"/proc/{member}/task").glob("*"):
            try:
                comm = (task / "comm").read_text()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            key = (stage_of(comm, member != pid), int(task.name))
            threads[key] = (int(fields[11]) + int(fields[12])) / _TICKS
    return threads


def stage_delta(before: ThreadCpu, after: ThreadCpu) -> dict[str, float]:
    """CPU seconds per stage spent between two ``thread_cpu`` readings, largest first, thread
    by thread: one started in between counts whole, one that ended in between is missing (its
    share of the window is lost, never taken from the others)."""
    stages: dict[str, float] = {}
    for (stage, tid), cpu_s in after.items():
        spent = cpu_s - before.get((stage, tid), 0.0)
        if spent > 0:
            stages[stage] = stages.get(stage, 0.0) + spent
    return {stage: round(cpu_s, 3) for stage, cpu_s in sorted(stages.items(), key=lambda i: -i[1])}


class ProcessSampler:
    """Samples a process (and its children) every ``interval_s``; summarises CPU share and peak
    RSS.

    Parameters:
        pid: the process to watch.
        interval_s: sampling period.
    """

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self._pid = pid
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self.samples: list[tuple[float, float, int]] = []  # (t, cpu %, rss bytes)

    def __enter__(self) -> ProcessSampler:
        self._start_threads = thread_cpu(self._pid)
        self._start_cpu, self._start = cpu_seconds(self._pid), time.monotonic()
        self._end_threads = self._start_threads
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        try:
            self._end_cpu, self._end = cpu_seconds(self._pid), time.monotonic()
            self._end_threads = thread_cpu(self._pid)
        except (FileNotFoundError, ProcessLookupError):
            self._end_cpu, self._end = self._start_cpu, self._start

    def _run(self) -> None:
        previous_cpu, previous = cpu_seconds(self._pid), time.monotonic()
        while not self._stop.wait(self._interval_s):
            try:
                cpu, now = cpu_seconds(self._pid), time.monotonic()
                rss = rss_bytes(self._pid)
            except (FileNotFoundError, ProcessLookupError):
                return
            share = 100.0 * (cpu - previous_cpu) / max(now - previous, 1e-6)
            self.samples.append((now - self._start, share, rss))
            previous_cpu, previous = cpu, now

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the process and its children over the window (after ``__exit__``)."""
        return self._end_cpu - self._start_cpu

    def stages(self) -> dict[str, float]:
        """CPU seconds per stage (``stage_of``) over the window, largest first."""
        return stage_delta(self._start_threads, self._end_threads)

    def summary(self) -> dict[str, float]:
        """Mean CPU (% of one core) over the whole window and the peak RSS (MiB)."""
        elapsed = max(self._end - self._start, 1e-6)
        peak = max((rss for _t, _c, rss in self.samples), default=0)
        return {
            "cpu_percent_mean": round(100.0 * (self._end_cpu - self._start_cpu) / elapsed, 1),
            "rss_mib_peak": round(peak / 2**20, 1),
        }

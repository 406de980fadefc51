"""Every broker and node a tool starts is stopped on every way out (issue 60).

The brokers run in sessions of their own (a terminal's Ctrl-C must not reach them before the
tool stops them in order), so nothing but the tool stops them: a ``chronos bench`` that died on
SIGTERM left its Apache Kafka JVM running, 1 GiB of heap, found 74 minutes later.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chronos.bench import stack as bench_stack
from chronos.devstack.brokers import LocalBroker, start_local_broker
from tests.integration.harness import wait_until

REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> Iterator[tuple[int, str]]:
    """(pid, command line) of each process whose parent is ``pid``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile
            continue
        # The command name (field 2) may hold spaces: the parent is the 2nd field after ")".
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            yield int(entry.name), cmdline


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(240)
def test_a_bench_stopped_by_sigterm_stops_the_broker_it_started(tmp_path: Path) -> None:
    """Fails on the code before the fix: the bench died at once on SIGTERM and its broker
    (an Apache Kafka JVM) ran on."""
    bench = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chronos.cli.entry",
            "bench",
            "--broker",
            "kafka",
            "--only",
            "steady",
            "--rates",
            "500",
            "--seconds",
            "120",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    brokers: list[int] = []
    try:

        def broker_started() -> bool:
            brokers[:] = [pid for pid, cmd in _children(bench.pid) if "kafka.Kafka" in cmd]
            return bool(brokers) or bench.poll() is not None

        wait_until(broker_started, 120, "the bench started its broker")
        assert brokers, "the bench exited before it started a broker"
        bench.send_signal(signal.SIGTERM)
        bench.wait(120)
        left = [pid for pid in brokers if _alive(pid)]
        assert not left, f"the broker outlived the bench: {left}"
    finally:
        for pid in brokers:
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
        if bench.poll() is None:
            bench.kill()


def test_a_stack_whose_start_fails_stops_the_broker_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fails on the code before the fix: a failure after the broker started (its topics not
    created on a loaded machine) left the broker running, as ``__exit__`` never ran."""
    started: list[int | None] = []
    real_start = start_local_broker

    def recording(*args: object, **kwargs: object) -> LocalBroker:
        broker = real_start(*args, **kwargs)  # type: ignore[arg-type]
        started.append(broker.pid)
        return broker

    def refused(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("topics not created")

    monkeypatch.setattr(bench_stack, "start_local_broker", recording)
    monkeypatch.setattr(bench_stack, "ensure_topics", refused)
    with pytest.raises(RuntimeError, match="topics not created"):
        with bench_stack.BenchStack(bootstrap=None, broker="tansu"):
            pass
    (pid,) = started
    assert pid is not None and not _alive(pid), "the broker outlived its stack"

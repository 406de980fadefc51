"""Push worker on a fake clock with a real store: never early, late arrivals, repeats, seek."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from chronos.clock import FakeClock
from chronos.delivery.job import DeliveryJob
from chronos.logs import configure_logging
from chronos.metrics import CountingMetrics, NullMetrics
from chronos.model import DelayMessage
from chronos.node import push as push_module
from chronos.node.progress import ProgressTracker
from chronos.node.push import PushWorker
from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.settings import DeleteSettings, LogSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs
from tests.waiting import wait_until

T0 = 1_700_000_000_000


@dataclass
class Env:
    clock: FakeClock
    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    tracker: ProgressTracker
    jobs: queue.Queue[list[DeliveryJob]]
    push: PushWorker

    def add(self, message_id: str, due_ms: int, repeat: Repeat | None = None) -> None:
        self.ledger.apply([DelayMessage(message_id, "t", None, b"v", [], due_ms, repeat)])

    def worker(self, **overrides: Any) -> PushWorker:
        """Another push worker over this store, with some of its parts or options replaced."""
        parts: dict[str, Any] = {
            "store": self.store,
            "ledger": self.ledger,
            "frontier": self.frontier,
            "tracker": self.tracker,
            "jobs": self.jobs,
            "clock": self.clock,
            "batch_max": 3,
            "metrics": NullMetrics(),
        }
        return PushWorker(**(parts | overrides))

    def drain(self) -> list[DeliveryJob]:
        out: list[DeliveryJob] = []
        while not self.jobs.empty():
            out += self.jobs.get_nowait()
        return out


class _Gate:
    """A cancel gate with a given horizon that keeps what the push waits for."""

    def __init__(self, horizon: Callable[[EpochMs], EpochMs]) -> None:
        self._horizon = horizon
        self.wanted: list[EpochMs] = []

    def horizon(self, now_ms: EpochMs) -> EpochMs:
        return self._horizon(now_ms)

    def want(self, slot: EpochMs) -> None:
        self.wanted.append(slot)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    clock = FakeClock(T0)
    store = RocksStore(tmp_path / "store", StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    ledger = Ledger(store, frontier, clock, DeleteSettings())
    tracker = ProgressTracker(0)
    jobs: queue.Queue[list[DeliveryJob]] = queue.Queue(maxsize=100)
    push = PushWorker(
        store=store,
        ledger=ledger,
        frontier=frontier,
        tracker=tracker,
        jobs=jobs,
        clock=clock,
        batch_max=3,
        metrics=NullMetrics(),
    )
    yield Env(clock, store, frontier, ledger, tracker, jobs, push)
    store.close()


def test_nothing_is_dispatched_before_its_due_time(env: Env) -> None:
    env.add("a", T0 + 100)
    env.add("b", T0 + 100)
    env.add("c", T0 + 250)
    assert env.push.scan_due() == T0 + 100  # the next slot: where the worker sleeps until
    assert env.drain() == []
    env.clock.advance(99)
    assert env.push.scan_due() == T0 + 100
    assert env.drain() == []
    env.clock.advance(1)
    assert env.push.scan_due() == T0 + 250
    assert [j.message.id for j in env.drain() if j.message] == ["a", "b"]
    env.clock.advance(1000)
    assert env.push.scan_due() is None
    assert [(j.message.id, j.due_ms) for j in env.drain() if j.message] == [("c", T0 + 250)]


def test_late_arrival_behind_the_frontier_goes_out_on_the_next_scan(env: Env) -> None:
    env.push.scan_due()  # frontier is now T0
    env.add("late", T0 - 5_000)  # due long ago, arrives after the scan passed its slot
    assert keys.split_message_key(env.store.first_key_from(b"") or b"")[0] == T0 + 1
    env.clock.advance(1)
    env.push.scan_due()
    jobs = env.drain()
    assert [(j.message.id, j.due_ms) for j in jobs if j.message] == [("late", T0 - 5_000)]


def test_scan_stops_below_a_write_in_progress_and_covers_it_once_visible(env: Env) -> None:
    """The hand-off without a lock across the write: a scan that runs while a late message is
    being written neither passes its slot nor lets the seek pass it."""
    env.push.scan_due()  # frontier T0
    env.clock.advance(10)
    with env.frontier.placing(T0 - 5_000) as frontier:  # a late arrival: slot T0 + 1
        slot = env.frontier.slot_for(frontier, T0 - 5_000)
        assert env.push.scan_due() == T0 + 10 + 10  # held back: looks again in 10 ms at most
        assert env.tracker.collect()[0] < slot
        batch = env.store.batch()
        key = keys.message_key(slot, "late")
        batch.put_message(key, codec.encode(DelayMessage("late", "t", None, b"v", [], T0 - 5_000)))
        batch.put_index("late", keys.index_pending(key))
        env.store.write(batch)
    env.push.scan_due()
    assert [j.message.id for j in env.drain() if j.message] == ["late"]


def test_batches_keep_key_order_and_seek_waits_for_every_ack(env: Env) -> None:
    for index in range(7):
        env.add(f"m{index}", T0 - 100 + index)
    env.push.scan_due()
    jobs = env.drain()
    assert [j.message.id for j in jobs if j.message] == [f"m{i}" for i in range(7)]
    for job in jobs[1:]:
        env.tracker.completed(job)
    seek, _, _ = env.tracker.collect()
    assert seek == T0 - 100 - 1  # m0 unacknowledged holds the seek before its slot
    env.tracker.completed(jobs[0])
    assert env.tracker.collect()[0] == T0  # everything up to the scan is acknowledged


def test_overdue_repeat_catching_up_latest_collapses_to_the_latest_occurrence(env: Env) -> None:
    env.add("r", T0 - 10_000, Repeat(RepeatKind.FIXED, 1000, 100, catch_up=CatchUp.LATEST))
    env.push.scan_due()
    (job,) = env.drain()
    assert job.message is not None and job.message.occurrence == 11
    assert (job.due_ms, job.skipped) == (T0, 10)
    assert job.followup is not None and job.followup.occurrence == 12
    assert job.followup.due_ms == T0 + 1000


def test_overdue_repeat_catching_up_all_delivers_each_missed_occurrence(env: Env) -> None:
    env.add("r", T0 - 10_000, Repeat(RepeatKind.FIXED, 1000, 100))
    env.push.scan_due()
    (job,) = env.drain()
    assert job.message is not None and job.message.occurrence == 1
    assert (job.due_ms, job.skipped) == (T0 - 10_000, 0)
    # The next one is overdue too: it follows at once, on its own.
    assert job.followup is not None and job.followup.occurrence == 2
    assert job.followup.due_ms == T0 - 9_000


def test_a_superseded_repeat_key_is_not_delivered_again(env: Env) -> None:
    env.add("r", T0 - 500, Repeat(RepeatKind.FIXED, 1000, 5))
    env.push.scan_due()
    (job,) = env.drain()
    assert job.followup is not None
    env.tracker.completed(job)
    env.ledger.commit_progress(0, [(job.key, job.followup)])  # next occurrence, seek not moved
    # After a crash the old key is scanned again (seek did not pass it): it must be skipped.
    rescan = env.worker(frontier=Frontier(0), tracker=ProgressTracker(0))
    rescan.scan_due()
    jobs = env.drain()
    assert len(jobs) == 1 and jobs[0].done and jobs[0].message is None


def test_a_full_queue_blocks_the_scan_until_senders_take(env: Env, tmp_path: Path) -> None:
    small: queue.Queue[list[DeliveryJob]] = queue.Queue(maxsize=1)
    push = env.worker(jobs=small, batch_max=1)
    for index in range(3):
        env.add(f"m{index}", T0 - 10 + index)
    scan = threading.Thread(target=push.scan_due)
    scan.start()
    wait_until(small.full, 60, "the scan filled the queue")
    assert scan.is_alive(), "the scan went on although the queue was full"
    taken = [small.get(timeout=60)[0].key for _ in range(3)]
    scan.join(60)
    assert not scan.is_alive()
    assert taken == sorted(taken)


def test_delivery_pauses_while_progress_cannot_be_persisted(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: what is delivered while the seek cannot be written is all delivered again
    after a restart, so past ``max_unpersisted_s`` the scan waits."""
    push = env.worker(max_unpersisted_s=0.05)
    env.add("a", T0)
    env.tracker.persist_failing_since = time.monotonic() - 1.0
    configure_logging(LogSettings())  # info level and a fresh logger (see the next test)
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(push_module, "log", structlog.get_logger(push_module.__name__))
        scanning = threading.Thread(target=push.scan_due)
        scanning.start()
        wait_until(lambda: bool(logs), 60, "the scan paused")
        assert scanning.is_alive() and env.drain() == []
        env.tracker.persist_failing_since = None  # a write succeeded again
        scanning.join(60)
    assert not scanning.is_alive()
    assert [job.message.id for job in env.drain() if job.message] == ["a"]
    assert [e["event"] for e in logs] == ["delivery_paused", "delivery_resumed"]


def test_a_gate_holding_a_due_message_is_logged_as_delivery_paused(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest stopped (a full disk, Kafka silent) stops the cancel gate's watermark: due
    messages wait before any job exists. Past 5 s of that, ``delivery_paused`` (an error) says
    why, once; ``delivery_resumed`` when the gate lets them go. Mutant caught: a hold seen only
    in the cancel_gate_held histogram (the full-disk check logged no pause)."""
    watermark = [T0]
    push = env.worker(cancel_gate=_Gate(lambda now: min(now, watermark[0])))
    env.add("a", T0 + 10)
    # An in-process CLI run of an earlier test left errors-only logs: info level again, and a
    # fresh logger (one first used earlier keeps that set-up: cache_logger_on_first_use).
    configure_logging(LogSettings())
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(push_module, "log", structlog.get_logger(push_module.__name__))
        env.clock.advance(4_000)
        push.scan_due()
        assert [e["event"] for e in logs] == []  # held 4 s: lateness, not yet a pause
        for _ in range(3):
            env.clock.advance(1_000)
            push.scan_due()
        assert env.drain() == []
        watermark[0] = env.clock.now_ms()  # ingest applied again
        push.scan_due()
    assert [j.message.id for j in env.drain() if j.message] == ["a"]
    assert [(e["event"], e["log_level"]) for e in logs] == [
        ("delivery_paused", "error"),
        ("delivery_resumed", "info"),
    ]


def test_a_scan_gap_spaces_busy_scans_but_not_the_first_after_a_quiet_spell(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    push = env.worker(scan_gap_ms=300)
    pauses: list[float] = []

    def no_wait(seconds: float) -> bool:  # the stop event's wait, recorded instead of slept
        pauses.append(seconds)
        return False

    monkeypatch.setattr(push._stop, "wait", no_wait)
    elapsed = [100.0]  # the worker's monotonic clock, moved by the test only
    monkeypatch.setattr(push_module, "time", SimpleNamespace(monotonic=lambda: elapsed[0]))
    for message_id, due in (("a", T0), ("b", T0 + 1), ("c", T0 + 3), ("far", T0 + 10)):
        env.add(message_id, due)
    push.step()  # dispatches a, sleeps to b's slot (1 ms)
    assert pauses == []
    env.clock.advance(1)
    elapsed[0] += 0.05
    push.step()  # the previous scan dispatched: this one waits out the rest of the gap first
    assert pauses == [pytest.approx(0.25)]
    assert [j.message.id for j in env.drain() if j.message] == ["a", "b"]
    env.clock.advance(1)
    push.step()  # after the gap again, finds nothing due at T0 + 2: quiet
    assert len(pauses) == 2
    env.clock.advance(1)
    push.step()  # c, at once
    assert len(pauses) == 2
    assert [j.message.id for j in env.drain() if j.message] == ["c"]


def test_a_scan_shorter_than_a_batch_ends_the_sweep(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frontier holds the scanned range still: a second, empty store scan would be waste
    (an iterator per wake-up)."""
    scans: list[int] = []
    real_scan = env.store.scan

    def counted(start: bytes, stop: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        rows = real_scan(start, stop, limit)
        scans.append(len(rows))
        return rows

    monkeypatch.setattr(env.store, "scan", counted)
    for n in range(5):
        env.add(f"m{n}", T0)
    env.push.scan_due()
    assert scans == [3, 2]  # a full batch, then the rest: no empty scan after it
    assert sorted(j.message.id for j in env.drain() if j.message) == [f"m{n}" for n in range(5)]


def test_a_gate_without_a_watermark_samples_the_held_message_s_lateness(env: Env) -> None:
    """After a start whose first watermark probe failed the horizon is 0: the gate holds
    everything, and each sample is how late the held message is, not the epoch. Mutant
    caught: ``now - limit`` (one sample of about 1.7 x 10^12 ms, seen after a restart in
    ``test_cron_everywhere``)."""
    metrics = CountingMetrics()
    push = env.worker(cancel_gate=_Gate(lambda now: 0), metrics=metrics)
    env.add("a", T0 + 10)
    env.clock.advance(1_000)
    push.scan_due()
    assert env.drain() == []
    held = metrics.histograms()["cancel_gate_held_ms"]
    assert held.max_ms == 990


def test_the_push_tells_the_cancel_gate_which_slot_it_waits_for(env: Env) -> None:
    """The gate's probes follow demand (an idle node asks Kafka nothing): the push names the
    next slot it sleeps until, and a due one the gate holds. Mutants caught: no want (the
    gate never probes for a message that falls due), the slot after the held one."""
    gate = _Gate(lambda now: min(now, T0 + 5))
    push = env.worker(cancel_gate=gate)
    env.add("later", T0 + 2_000)
    assert push.scan_due() == T0 + 2_000
    assert gate.wanted == [T0 + 2_000]
    env.add("held", T0 + 10)
    env.clock.advance(100)
    push.scan_due()
    assert env.drain() == []
    assert gate.wanted[-1] == T0 + 10

"""ProgressTracker: the seek may only pass the acknowledged prefix of dispatched jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chronos.clock import FakeClock
from chronos.delivery.job import DeliveryJob
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.node.progress import ProgressTracker, ProgressWorker
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, resume_frontier
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import keys
from chronos.store.rocks import RocksStore
from tests.waiting import wait_until


def _job(slot: int, message_id: str, followup: bool = False) -> DeliveryJob:
    message = DelayMessage(
        message_id,
        "t",
        None,
        None,
        first_due_ms=slot,
        repeat=Repeat(RepeatKind.FIXED, 1000, 5) if followup else None,
    )
    nxt = (
        DelayMessage(
            message_id, "t", None, None, first_due_ms=slot, repeat=message.repeat, occurrence=2
        )
        if followup
        else None
    )
    return DeliveryJob(
        key=keys.message_key(slot, message_id), message=message, due_ms=slot, followup=nxt
    )


def test_nothing_dispatched_seek_is_scanned() -> None:
    tracker = ProgressTracker(50)
    assert tracker.collect()[::2] == (50, [])
    tracker.scanned_through(80)
    assert tracker.collect()[::2] == (80, [])
    tracker.scanned_through(70)  # never back
    assert tracker.collect()[::2] == (80, [])


def test_unacked_job_holds_seek_before_its_slot() -> None:
    tracker = ProgressTracker(0)
    a, b, c = _job(100, "a"), _job(200, "b"), _job(300, "c")
    tracker.dispatched([a, b, c])
    tracker.scanned_through(300)
    assert tracker.collect()[::2] == (99, [])
    assert tracker.in_flight() == 3

    tracker.completed(a)
    assert tracker.collect()[::2] == (199, [])
    assert tracker.in_flight() == 2

    tracker.completed(c)  # out of order: b still holds the seek
    assert tracker.collect()[::2] == (199, [])
    assert tracker.in_flight() == 2

    tracker.completed(b)
    assert tracker.collect()[::2] == (300, [])
    assert tracker.in_flight() == 0


def test_scanned_through_bounds_seek() -> None:
    tracker = ProgressTracker(0)
    a, b = _job(100, "a"), _job(500, "b")
    tracker.dispatched([a, b])
    tracker.scanned_through(150)  # scanned less than b's slot
    tracker.completed(a)
    assert tracker.collect()[0] == 150  # min(scanned, 499)
    tracker.completed(b)
    assert tracker.collect()[0] == 150  # all acked, still only scanned through 150
    tracker.scanned_through(600)
    assert tracker.collect()[0] == 600


def test_same_slot_jobs() -> None:
    tracker = ProgressTracker(0)
    a, b = _job(100, "a"), _job(100, "b")
    tracker.dispatched([a, b])
    tracker.scanned_through(100)
    tracker.completed(a)
    assert tracker.collect()[0] == 99
    tracker.completed(b)
    assert tracker.collect()[0] == 100


def test_followups_only_when_job_leaves_prefix() -> None:
    tracker = ProgressTracker(0)
    a, b, c = _job(100, "a", followup=True), _job(200, "b", followup=True), _job(300, "c")
    tracker.dispatched([a, b, c])
    tracker.scanned_through(300)

    tracker.completed(b)
    seek, _cursor, followups = tracker.collect()
    assert seek == 99 and followups == []  # b acked but a is not: no follow-up yet

    tracker.completed(a)
    seek, _cursor, followups = tracker.collect()
    assert seek == 299
    assert [(k, m.id, m.occurrence) for k, m in followups] == [
        (a.key, "a", 2),
        (b.key, "b", 2),
    ]
    # returned once only
    assert tracker.collect()[::2] == (299, [])

    tracker.completed(c)
    assert tracker.collect()[::2] == (300, [])


def test_later_dispatch_after_collect() -> None:
    tracker = ProgressTracker(0)
    a = _job(100, "a")
    tracker.dispatched([a])
    tracker.scanned_through(100)
    tracker.completed(a)
    assert tracker.collect()[::2] == (100, [])
    d = _job(400, "d")
    tracker.dispatched([d])
    tracker.scanned_through(450)
    assert tracker.collect()[::2] == (399, [])


def test_delivered_counts_acknowledged_productions_only() -> None:
    metrics = CountingMetrics()
    tracker = ProgressTracker(0, metrics, FakeClock(1_000))
    produced, superseded, dead = _job(100, "a"), _job(200, "b"), _job(300, "c")
    produced.attempts, dead.attempts = 1, 1
    dead.dead_reason = "unknown topic"
    superseded.done = True  # a repeat occurrence the index no longer schedules: never produced
    tracker.dispatched([produced, superseded, dead])
    tracker.scanned_through(300)
    produced(None)  # the job is its own delivery callback
    tracker.completed(dead)  # acknowledged on the dead-letter topic
    assert tracker.collect()[::2] == (300, [])
    assert metrics.totals() == {"delivered": 1}
    assert metrics.summaries()["ack_lateness_ms"]["max"] == 900  # due 100, collected at 1000


def test_ack_lateness_of_a_late_arrival_counts_from_its_slot() -> None:
    metrics = CountingMetrics()
    tracker = ProgressTracker(0, metrics, FakeClock(1_000))
    message = DelayMessage("past", "t", None, b"v", [], 0)
    overdue = DeliveryJob(keys.message_key(990, "past"), message, 0)  # due in 1970, stored at 990
    overdue.attempts = 1
    tracker.dispatched([overdue])
    tracker.scanned_through(990)
    overdue(None)
    tracker.collect()
    assert metrics.summaries()["ack_lateness_ms"]["max"] == 10


def test_a_failed_progress_write_is_kept_marked_and_retried(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "store", StoreSettings())
    try:
        ledger = Ledger(store, Frontier(0), FakeClock(1_000), DeleteSettings())
        tracker = ProgressTracker(0, CountingMetrics(), FakeClock(1_000))
        worker = ProgressWorker(tracker, ledger, 20)
        job = _job(100, "a")
        job.attempts = 1
        tracker.dispatched([job])
        tracker.scanned_through(150)
        job(None)
        real = ledger.commit_progress

        def full_disk(*_args: object, **_kwargs: object) -> None:
            raise OSError("IO error: No space left on device")

        ledger.commit_progress = full_disk  # type: ignore[method-assign, assignment]
        worker.commit()  # logged, not raised: the worker goes on and tries again
        assert tracker.persist_failing_since is not None and ledger.seek_ms == 0
        ledger.commit_progress = real  # type: ignore[method-assign]
        worker.commit()
        assert tracker.persist_failing_since is None and ledger.seek_ms == 150
    finally:
        store.close()


def test_cursor_marks_a_partly_acknowledged_slot() -> None:
    tracker = ProgressTracker(0)
    a, b, c = _job(100, "a"), _job(100, "b"), _job(100, "c")
    tracker.dispatched([a, b, c])
    tracker.scanned_through(100)
    tracker.completed(a)
    tracker.completed(b)
    assert tracker.collect() == (99, b.key, [])
    tracker.completed(c)
    assert tracker.collect() == (100, None, [])


def test_delivery_resumes_by_itself_once_the_disk_accepts_writes_again(tmp_path: Path) -> None:
    """A full disk, then freed: no acknowledgement is in flight any more, and the worker must
    still write again and clear the mark the push worker waits on (it used to sleep for ever:
    delivery stalled until a restart)."""
    store = RocksStore(tmp_path / "store", StoreSettings())
    ledger = Ledger(store, Frontier(0), FakeClock(1_000), DeleteSettings())
    tracker = ProgressTracker(0, CountingMetrics(), FakeClock(1_000))
    worker = ProgressWorker(tracker, ledger, 20)
    real = ledger.commit_progress
    disk_full = True
    attempts = 0

    def commit_progress(*args: Any, **kwargs: Any) -> Any:
        nonlocal attempts
        attempts += 1
        if disk_full:
            raise OSError("IO error: No space left on device")
        return real(*args, **kwargs)

    ledger.commit_progress = commit_progress  # type: ignore[method-assign]
    job = _job(100, "a")
    job.attempts = 1
    tracker.dispatched([job])
    tracker.scanned_through(150)
    job(None)
    worker.start()
    try:
        wait_until(lambda: tracker.persist_failing_since is not None, 30, "the failure noticed")
        assert tracker.in_flight() == 0  # collected: nothing left to wake the worker
        failed = attempts
        # Full for a while: retries consume any earlier wake-up.
        wait_until(lambda: attempts >= failed + 2, 30, "the worker retried the write twice")
        disk_full = False
        wait_until(lambda: tracker.persist_failing_since is None, 30, "delivery resumed")
        assert ledger.seek_ms == 150
    finally:
        worker.stop()
        worker.join(5)
        store.close()


def test_cursor_survives_a_restart_and_new_adds_land_after_it(tmp_path: Path) -> None:
    path = tmp_path / "store"
    store = RocksStore(path, StoreSettings())
    try:
        ledger = Ledger(store, Frontier(0), FakeClock(1_000), DeleteSettings())
        ledger.commit_progress(99, [], keys.message_key(100, "m"))
    finally:
        store.close()
    store = RocksStore(path, StoreSettings())
    try:
        frontier = Frontier(resume_frontier(store))
        ledger = Ledger(store, frontier, FakeClock(1_000), DeleteSettings())
        assert ledger.seek_ms == 99 and ledger.cursor == keys.message_key(100, "m")
        # An add due in the past may not land in slot 100 behind the cursor ("a" < "m").
        assert frontier.value == 100
        assert frontier.slot_for(frontier.value, 50) == 101
        ledger.commit_progress(100, [])
        assert ledger.cursor is None
    finally:
        store.close()

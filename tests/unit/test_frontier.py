"""Push frontier: slot placement, monotonic advance, wake-ups across threads."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from chronos.node.frontier import Frontier

NOW = 1_700_000_000_000


def test_slot_for() -> None:
    f = Frontier(1000)
    assert f.slot_for(1000, 1001) == 1001  # due after frontier: keeps due
    assert f.slot_for(1000, 5000) == 5000
    assert f.slot_for(1000, 1000) == 1001  # due at frontier: first slot after it
    assert f.slot_for(1000, 3) == 1001  # due before frontier
    assert f.slot_for(1000, 0) == 1001


@settings(max_examples=200, deadline=None)
@given(frontier=st.integers(0, 2**62), due=st.integers(0, 2**62))
def test_slot_for_is_after_frontier_and_not_before_due(frontier: int, due: int) -> None:
    slot = Frontier(0).slot_for(frontier, due)
    assert slot > frontier
    assert slot >= due
    assert slot == max(due, frontier + 1)


def test_advance_never_moves_back() -> None:
    f = Frontier(100)
    assert f.value == 100
    assert f.advance(200) == 100
    assert f.value == 200
    assert f.advance(150) == 200
    assert f.value == 200
    assert f.advance(200) == 200
    assert f.value == 200
    with f.held() as held:
        assert held == 200


@settings(max_examples=100, deadline=None)
@given(start=st.integers(0, 10**6), moves=st.lists(st.integers(0, 10**6), max_size=20))
def test_advance_is_running_max(start: int, moves: list[int]) -> None:
    f = Frontier(start)
    expected = start
    for to in moves:
        assert f.advance(to) == expected
        expected = max(expected, to)
        assert f.value == expected


def test_held_blocks_advance() -> None:
    f = Frontier(0)
    advanced = threading.Event()

    def mover() -> None:
        f.advance(10)
        advanced.set()

    with f.held() as value:
        t = threading.Thread(target=mover)
        t.start()
        assert not advanced.wait(0.2)
        assert value == 0 and f.value == 0
    assert advanced.wait(5)
    t.join(5)
    assert f.value == 10


def _timed_wait(
    f: Frontier, until_ms: int | None, max_wait_s: float
) -> tuple[threading.Thread, list[float]]:
    elapsed: list[float] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        t0 = time.monotonic()
        f.wait(until_ms, NOW, max_wait_s)
        elapsed.append(time.monotonic() - t0)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    assert started.wait(5)
    time.sleep(0.1)  # let it block in wait
    return t, elapsed


def test_wait_returns_early_on_notify() -> None:
    f = Frontier(0)
    t, elapsed = _timed_wait(f, None, 5.0)
    assert not elapsed  # still waiting
    f.notify(NOW + 60_000)
    t.join(3)
    assert elapsed and elapsed[0] < 2.0


def test_wait_until_far_future_returns_on_earlier_notify() -> None:
    f = Frontier(0)
    t, elapsed = _timed_wait(f, NOW + 3_600_000, 5.0)
    f.notify(NOW + 10)
    t.join(3)
    assert elapsed and elapsed[0] < 2.0


def test_wait_returns_on_stop() -> None:
    f = Frontier(0)
    t, elapsed = _timed_wait(f, None, 5.0)
    f.stop()
    t.join(3)
    assert elapsed and elapsed[0] < 2.0
    # once stopped, wait never sleeps
    t0 = time.monotonic()
    f.wait(None, NOW, 5.0)
    assert time.monotonic() - t0 < 1.0


def test_notify_before_wait_due_now_returns_immediately() -> None:
    f = Frontier(0)
    f.notify(NOW - 5)
    t0 = time.monotonic()
    f.wait(None, NOW, 5.0)
    assert time.monotonic() - t0 < 1.0


def test_wait_until_in_past_returns_immediately() -> None:
    f = Frontier(0)
    t0 = time.monotonic()
    f.wait(NOW - 1, NOW, 5.0)
    f.wait(NOW, NOW, 5.0)
    assert time.monotonic() - t0 < 1.0


def test_wait_times_out_at_until() -> None:
    f = Frontier(0)
    t0 = time.monotonic()
    f.wait(NOW + 150, NOW, 5.0)
    took = time.monotonic() - t0
    assert 0.1 <= took < 2.0


def test_wait_capped_by_max_wait() -> None:
    f = Frontier(0)
    t0 = time.monotonic()
    f.wait(NOW + 3_600_000, NOW, 0.15)
    took = time.monotonic() - t0
    assert 0.1 <= took < 2.0


def test_pending_notify_consumed_by_wait() -> None:
    f = Frontier(0)
    f.notify(NOW - 5)
    f.wait(None, NOW, 5.0)  # consumes the notification
    t0 = time.monotonic()
    f.wait(None, NOW, 0.2)  # nothing pending: sleeps max_wait
    assert time.monotonic() - t0 >= 0.15

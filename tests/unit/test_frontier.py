"""Push frontier: slot placement, monotonic advance, wake-ups across threads."""

from __future__ import annotations

import threading
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from chronos.schedule.frontier import Frontier

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
    assert f.advance(200) == 200
    assert f.value == 200
    assert f.advance(150) == 200
    assert f.value == 200
    with f.placing(None) as held:
        assert held == 200


@settings(max_examples=100, deadline=None)
@given(start=st.integers(0, 10**6), moves=st.lists(st.integers(0, 10**6), max_size=20))
def test_advance_is_running_max(start: int, moves: list[int]) -> None:
    f = Frontier(start)
    expected = start
    for to in moves:
        expected = max(expected, to)
        assert f.advance(to) == expected
        assert f.value == expected


def test_placing_holds_the_frontier_below_the_lowest_reserved_slot() -> None:
    f = Frontier(100)
    with f.placing(500) as frontier:
        assert frontier == 100
        assert f.advance(10_000) == 499  # the write's messages (slots >= 500) stay ahead
        assert f.slot_for(frontier, 500) > f.value
    assert f.advance(10_000) == 10_000


def test_placing_late_messages_reserves_the_slot_after_the_frontier() -> None:
    f = Frontier(100)
    with f.placing(3) as frontier:  # due long ago: placed at frontier + 1
        assert f.slot_for(frontier, 3) == 101
        assert f.advance(10_000) == 100  # may not pass 101 yet
    assert f.advance(10_000) == 10_000


def test_placing_nothing_reserves_nothing() -> None:
    f = Frontier(100)
    with f.placing(None):
        assert f.advance(10_000) == 10_000


def test_nested_reservations_hold_at_the_lowest() -> None:
    f = Frontier(0)
    with f.placing(300):
        with f.placing(200):
            assert f.advance(1000) == 199
        assert f.advance(1000) == 299
    assert f.advance(1000) == 1000


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 10**6),
    dues=st.lists(st.integers(0, 2 * 10**6), min_size=1, max_size=10),
    moves=st.lists(st.integers(0, 3 * 10**6), max_size=10),
)
def test_no_reserved_slot_is_ever_at_or_behind_the_frontier(
    start: int, dues: list[int], moves: list[int]
) -> None:
    """The invariant the push worker relies on: while a write is in progress, every slot it
    places stays ahead of the frontier, however far the push worker tries to advance."""
    f = Frontier(start)
    with f.placing(min(dues)) as frontier:
        slots = [f.slot_for(frontier, due) for due in dues]
        for to in moves:
            f.advance(to)
            assert min(slots) > f.value


#: The waits' own cap in the tests below. A wake-up under test (a notify, a stop, the due time)
#: must come well before it, so a loaded machine's stalls of a second or two change nothing,
#: while a wait that missed its wake-up sleeps the whole cap and fails.
_CAP_S = 60.0


def _waited(f: Frontier, until_ms: int | None, max_wait_s: float = _CAP_S) -> float:
    """Seconds one ``wait`` took."""
    t0 = time.monotonic()
    f.wait(until_ms, NOW, max_wait_s)
    return time.monotonic() - t0


def test_held_back_push_is_woken_when_the_write_ends() -> None:
    f = Frontier(0)
    with f.placing(NOW - 10):
        assert f.advance(NOW) < NOW  # held back
    assert _waited(f, None) < _CAP_S / 2  # the write's end left a wake-up: no sleep


def _waiting(f: Frontier, until_ms: int | None) -> tuple[threading.Thread, list[float]]:
    """A thread in ``wait`` (capped at ``_CAP_S``), and the seconds it took once it returns."""
    elapsed: list[float] = []
    t = threading.Thread(target=lambda: elapsed.append(_waited(f, until_ms)), daemon=True)
    t.start()
    return t, elapsed


def _returned_early(t: threading.Thread, elapsed: list[float]) -> bool:
    t.join(_CAP_S)
    return bool(elapsed) and elapsed[0] < _CAP_S / 2


def test_wait_returns_early_on_notify() -> None:
    """Each notify names an earlier slot, so each wakes the waiter: whether it blocked before the
    first (the usual case) or, on a loaded machine, only after it (the first notify then set
    what it waits for, a minute ahead, and the next one wakes it)."""
    f = Frontier(0)
    t, elapsed = _waiting(f, None)
    slot = NOW + 60_000
    while t.is_alive() and slot > NOW + 59_000:
        f.notify(slot)
        slot -= 1
        t.join(0.05)
    assert _returned_early(t, elapsed)


def test_wait_until_far_future_returns_on_earlier_notify() -> None:
    f = Frontier(0)
    t, elapsed = _waiting(f, NOW + 3_600_000)
    f.notify(NOW + 10)  # before or during the wait: either way it ends within 10 ms of NOW
    assert _returned_early(t, elapsed)


def test_wait_returns_on_stop() -> None:
    f = Frontier(0)
    t, elapsed = _waiting(f, None)
    f.stop()  # before or during the wait: either way it returns
    assert _returned_early(t, elapsed)
    assert _waited(f, None) < _CAP_S / 2  # once stopped, wait never sleeps


def test_notify_before_wait_due_now_returns_immediately() -> None:
    f = Frontier(0)
    f.notify(NOW - 5)
    assert _waited(f, None) < _CAP_S / 2


def test_wait_until_in_past_returns_immediately() -> None:
    f = Frontier(0)
    assert _waited(f, NOW - 1) + _waited(f, NOW) < _CAP_S / 2


def test_wait_times_out_at_until() -> None:
    f = Frontier(0)
    assert 0.1 <= _waited(f, NOW + 150) < _CAP_S / 2


def test_wait_capped_by_max_wait() -> None:
    f = Frontier(0)
    assert 0.1 <= _waited(f, NOW + 3_600_000, max_wait_s=0.15) < _CAP_S / 2


def test_pending_notify_consumed_by_wait() -> None:
    f = Frontier(0)
    f.notify(NOW - 5)
    assert _waited(f, None) < _CAP_S / 2  # consumes the notification
    assert _waited(f, None, max_wait_s=0.2) >= 0.15  # nothing pending: sleeps max_wait


def test_settled_waits_for_the_writes_begun_before_it() -> None:
    """A row a scan saw may belong to a write still open: the offsets ``settled`` returns
    cover it only once that write ended. Mutant caught: the completed offsets returned at
    once (the open write's offset missing)."""
    f = Frontier(NOW)
    inside, release = threading.Event(), threading.Event()

    def write() -> None:
        with f.placing(NOW + 5000, {0: 8}):
            inside.set()
            release.wait(30)

    writer = threading.Thread(target=write)
    writer.start()
    assert inside.wait(30)
    assert f.settled(0.01) is None  # the write is still open
    found: list[dict[int, int] | None] = []
    waiter = threading.Thread(target=lambda: found.append(f.settled(30)))
    waiter.start()
    release.set()
    waiter.join(30)
    writer.join(30)
    assert found == [{0: 8}]
    with f.placing(NOW + 6000, {0: 9}):
        pass
    assert f.settled(0.01) == {0: 9}  # nothing open: at once

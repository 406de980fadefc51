"""Repeat schedules: due times, gap capping, collapse of overdue occurrences."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chronos.repeat import CatchUp, Repeat, RepeatKind

FIRST = 1_700_000_000_000


def _dues(repeat: Repeat, first: int) -> list[int]:
    """Independent brute force: due time of occurrences 1..times."""
    dues = [first]
    for k in range(1, repeat.times):
        if repeat.kind is RepeatKind.FIXED:
            gap = repeat.interval_ms
        else:
            gap = min(repeat.interval_ms * repeat.multiplier ** (k - 1), repeat.max_interval_ms)
        dues.append(dues[-1] + gap)
    return dues


def _brute_latest(repeat: Repeat, first: int, occurrence: int, now: int) -> tuple[int, int]:
    dues = _dues(repeat, first)
    occ = occurrence
    while occ < repeat.times and dues[occ] <= now:  # dues[occ] is occurrence occ+1
        occ += 1
    return occ, dues[occ - 1]


def test_fixed_due_of() -> None:
    r = Repeat(RepeatKind.FIXED, 5000, 4)
    assert [r.due_of(FIRST, k) for k in (1, 2, 3, 4)] == [
        FIRST,
        FIRST + 5000,
        FIRST + 10_000,
        FIRST + 15_000,
    ]
    assert r.gap_after(1) == r.gap_after(3) == 5000


def test_exponential_due_of_and_cap() -> None:
    r = Repeat(RepeatKind.EXPONENTIAL, 1000, 7, 2, 5000)
    assert [r.gap_after(k) for k in range(1, 7)] == [1000, 2000, 4000, 5000, 5000, 5000]
    assert [r.due_of(FIRST, k) - FIRST for k in range(1, 8)] == [
        0,
        1000,
        3000,
        7000,
        12_000,
        17_000,
        22_000,
    ]


def test_exponential_gap_capped_for_huge_occurrence() -> None:
    r = Repeat(RepeatKind.EXPONENTIAL, 1000, 10**6, 1000, 86_400_000)
    assert r.gap_after(2) == 1_000_000
    assert r.gap_after(3) == 86_400_000
    assert r.gap_after(10**6 - 1) == 86_400_000


def test_fixed_latest_due_collapses_overdue() -> None:
    r = Repeat(RepeatKind.FIXED, 1000, 10)
    # not yet due: the starting occurrence, even though it is due after now
    assert r.latest_due(FIRST, 1, FIRST - 500) == (1, FIRST)
    assert r.latest_due(FIRST, 1, FIRST) == (1, FIRST)
    assert r.latest_due(FIRST, 1, FIRST + 999) == (1, FIRST)
    assert r.latest_due(FIRST, 1, FIRST + 1000) == (2, FIRST + 1000)
    assert r.latest_due(FIRST, 1, FIRST + 4500) == (5, FIRST + 4000)
    assert r.latest_due(FIRST, 3, FIRST + 4500) == (5, FIRST + 4000)
    # never beyond times
    assert r.latest_due(FIRST, 1, FIRST + 10**9) == (10, FIRST + 9000)
    assert r.latest_due(FIRST, 10, FIRST + 10**9) == (10, FIRST + 9000)


def test_exponential_latest_due_collapses_overdue() -> None:
    r = Repeat(RepeatKind.EXPONENTIAL, 1000, 6, 2, 5000)  # dues +0,1000,3000,7000,12000,17000
    assert r.latest_due(FIRST, 1, FIRST - 1) == (1, FIRST)
    assert r.latest_due(FIRST, 1, FIRST + 2999) == (2, FIRST + 1000)
    assert r.latest_due(FIRST, 1, FIRST + 3000) == (3, FIRST + 3000)
    assert r.latest_due(FIRST, 2, FIRST + 11_999) == (4, FIRST + 7000)
    assert r.latest_due(FIRST, 1, FIRST + 10**9) == (6, FIRST + 17_000)
    assert r.latest_due(FIRST, 4, FIRST) == (4, FIRST + 7000)


def test_single_occurrence_never_moves() -> None:
    for kind in RepeatKind:
        r = Repeat(kind, 1000, 1, 2, 5000)
        assert r.latest_due(FIRST, 1, FIRST + 10**6) == (1, FIRST)


REPEATS = st.one_of(
    st.builds(
        Repeat,
        kind=st.just(RepeatKind.FIXED),
        interval_ms=st.integers(1, 10_000),
        times=st.integers(1, 60),
    ),
    st.builds(
        Repeat,
        kind=st.just(RepeatKind.EXPONENTIAL),
        interval_ms=st.integers(1, 10_000),
        times=st.integers(1, 60),
        multiplier=st.integers(2, 20),
        max_interval_ms=st.integers(1, 200_000),
    ).filter(lambda r: r.max_interval_ms >= r.interval_ms),
)


@settings(max_examples=400, deadline=None)
@given(repeat=REPEATS, data=st.data())
def test_latest_due_matches_brute_force(repeat: Repeat, data: st.DataObject) -> None:
    dues = _dues(repeat, FIRST)
    occurrence = data.draw(st.integers(1, repeat.times), label="occurrence")
    now = data.draw(st.integers(FIRST - 10_000, dues[-1] + 10_000), label="now")
    got = repeat.latest_due(FIRST, occurrence, now)
    assert got == _brute_latest(repeat, FIRST, occurrence, now)
    occ, due = got
    assert occurrence <= occ <= repeat.times
    assert due == dues[occ - 1] == repeat.due_of(FIRST, occ)
    if occ > occurrence:
        assert due <= now  # a collapsed occurrence is never in the future
    if occ < repeat.times:
        assert dues[occ] > now  # the next one is still ahead: this is the latest due


@settings(max_examples=200, deadline=None)
@given(repeat=REPEATS, data=st.data())
def test_due_of_matches_brute_force(repeat: Repeat, data: st.DataObject) -> None:
    dues = _dues(repeat, FIRST)
    k = data.draw(st.integers(1, repeat.times))
    assert repeat.due_of(FIRST, k) == dues[k - 1]
    if k < repeat.times:
        assert repeat.gap_after(k) == dues[k] - dues[k - 1]
        if repeat.kind is RepeatKind.EXPONENTIAL:
            assert repeat.gap_after(k) <= repeat.max_interval_ms


def test_catch_up_all_delivers_each_occurrence_inside_the_window() -> None:
    r = Repeat(RepeatKind.FIXED, 1000, 100)
    assert r.catch_up is CatchUp.ALL
    # A 7 s failover: occurrence 3 is still the one to deliver, then 4, 5, ... each once.
    assert r.due_now(FIRST, 3, FIRST + 9_000, window_ms=60_000) == (3, FIRST + 2_000)
    # Not due yet: itself.
    assert r.due_now(FIRST, 3, FIRST + 1_000, window_ms=60_000) == (3, FIRST + 2_000)


def test_catch_up_all_collapses_only_what_is_older_than_the_window() -> None:
    r = Repeat(RepeatKind.FIXED, 1000, 100)
    # Now = occurrence 51's due; window 10 s: occurrences due before FIRST + 40,000 - 1 ms
    # collapse into the latest of them (40), then 41.. follow one by one.
    assert r.due_now(FIRST, 1, FIRST + 50_000, window_ms=10_000) == (40, FIRST + 39_000)
    # Never past the last occurrence.
    assert r.due_now(FIRST, 1, FIRST + 10**9, window_ms=10_000) == (100, FIRST + 99_000)


def test_catch_up_latest_is_the_collapse() -> None:
    r = Repeat(RepeatKind.FIXED, 1000, 100, catch_up=CatchUp.LATEST)
    assert r.due_now(FIRST, 3, FIRST + 9_000, window_ms=60_000) == r.latest_due(
        FIRST, 3, FIRST + 9_000
    )

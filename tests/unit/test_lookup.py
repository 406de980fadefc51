"""Status, listing and forecast over a real RocksDB store, in every state a message can be in."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from chronos.clock import FakeClock
from chronos.delivery.job import DeliveryJob
from chronos.listing import PageQuery
from chronos.model import CancelRequest, DelayMessage, RescheduleRequest
from chronos.node.progress import ProgressTracker
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, next_occurrence
from chronos.schedule.lookup import Lookup, NotReady
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import keys, outcome
from chronos.store.rocks import RocksStore

T0 = 1_700_000_040_000  # a whole minute
Env = tuple[RocksStore, Frontier, Ledger, Lookup]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    store = RocksStore(tmp_path / "store", StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    ledger = Ledger(store, frontier, FakeClock(T0), DeleteSettings(tombstone_retention_s=60))
    yield store, frontier, ledger, Lookup(store, ledger, scan_max=1_000)
    store.close()


def _msg(message_id: str, due: int, topic: str = "t", repeat: Repeat | None = None) -> DelayMessage:
    return DelayMessage(message_id, topic, None, b"v", [], due, repeat)


def _deliver(
    frontier: Frontier, ledger: Ledger, seek: int, outcomes: list[tuple[str, bytes]]
) -> None:
    frontier.advance(seek)
    ledger.commit_progress(seek, [], outcomes=[(i.encode(), v) for i, v in outcomes])


def test_status_of_every_state(env: Env) -> None:
    store, frontier, ledger, lookup = env
    ledger.apply(
        [
            _msg("p", T0 + 60_000),
            _msg("d", T0 + 1_000),
            _msg("x", T0 + 2_000),
            _msg("c", T0 + 5_000),
        ]
    )
    ledger.apply([CancelRequest("c"), CancelRequest("never")])
    _deliver(
        frontier,
        ledger,
        T0 + 3_000,
        [
            ("d", outcome.delivered(T0 + 1_010, 2, 41, 1)),
            ("x", outcome.dead_lettered(T0 + 2_010, 1, "too large")),
        ],
    )
    assert lookup.status("p").as_json() == {
        "id": "p",
        "state": "pending",
        "topic": "t",
        "due_ms": T0 + 60_000,
        "slot_ms": T0 + 60_000,
        "occurrence": 1,
        "times": 1,
    }
    delivered = lookup.status("d")
    assert (delivered.state, delivered.partition, delivered.offset) == ("delivered", 2, 41)
    assert delivered.delivered_ms == T0 + 1_010
    dead = lookup.status("x")
    assert (dead.state, dead.dead_letter_reason) == ("dead_lettered", "too large")
    assert lookup.status("c").as_json() == {
        "id": "c",
        "state": "cancelled",
        "cancelled_ms": T0,
        "cancel": "removed",
    }
    assert lookup.status("never").cancel == "nothing_to_cancel"
    assert lookup.status("nobody").state == "unknown"


def test_a_message_moved_between_the_two_reads_of_a_status_is_found_at_its_new_slot(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reschedule applied after status read the index, before it read the message: the old
    key finds nothing. Status follows the move instead of answering pending with no topic (the
    proxy then refused a topic-limited token's cancel right after its own reschedule). Mutant
    caught: the message read once, at the key of the first index read."""
    store, _frontier, ledger, lookup = env
    ledger.apply([_msg("m", T0 + 60_000, topic="payments")])
    read = store.get_messages
    moves = [RescheduleRequest("m", T0 + 120_000), RescheduleRequest("m", T0 + 180_000)]

    def read_after_a_move(message_keys: list[bytes]) -> list[bytes | None]:
        if moves:
            monkeypatch.setattr(store, "get_messages", read)  # the ledger's own reads
            ledger.apply([moves.pop(0)])
            monkeypatch.setattr(store, "get_messages", read_after_a_move)
        return read(message_keys)

    monkeypatch.setattr(store, "get_messages", read_after_a_move)
    status = lookup.status("m")
    assert not moves, "each read of the message came after a move"
    assert (status.state, status.topic, status.due_ms) == ("pending", "payments", T0 + 180_000)


def test_a_cancel_after_delivery_leaves_it_delivered_and_a_raced_one_says_so(env: Env) -> None:
    _store, frontier, ledger, lookup = env
    ledger.apply([_msg("late", T0 + 1_000), _msg("raced", T0 + 2_000)])
    _deliver(frontier, ledger, T0 + 1_000, [("late", outcome.delivered(T0 + 1_001, 0, 7, 1))])
    frontier.advance(T0 + 2_000)  # handed to a sender, not yet acknowledged
    outcome_ = ledger.apply([CancelRequest("late"), CancelRequest("raced")])
    assert outcome_.cancel_too_late == 1 and outcome_.cancel_raced == 1
    assert lookup.status("late").state == "delivered"
    assert lookup.status("raced").cancel == "removed_while_delivering"


def test_a_repeat_shows_its_next_occurrence_and_last_delivery(env: Env) -> None:
    _store, frontier, ledger, lookup = env
    first = _msg("r", T0 + 1_000, repeat=Repeat(RepeatKind.FIXED, 10_000, 3))
    ledger.apply([first])
    second = next_occurrence(first)
    assert second is not None
    frontier.advance(T0 + 1_000)
    ledger.commit_progress(
        T0 + 1_000,
        [(keys.message_key(T0 + 1_000, "r"), second)],
        outcomes=[(b"r", outcome.delivered(T0 + 1_005, 0, 3, 1))],
    )
    status = lookup.status("r")
    assert (status.state, status.occurrence, status.due_ms, status.next_due_ms) == (
        "pending",
        2,
        T0 + 11_000,
        T0 + 21_000,
    )
    assert status.last_delivery == {
        "occurrence": 1,
        "at_ms": T0 + 1_005,
        "partition": 0,
        "offset": 3,
    }


def test_purge_forgets_the_outcome_with_the_message(env: Env) -> None:
    store, frontier, ledger, lookup = env
    ledger.apply([_msg("d", T0 + 1_000)])
    _deliver(frontier, ledger, T0 + 1_000, [("d", outcome.delivered(T0, 0, 1, 1))])
    ledger.purge_delivered(T0 + 1_000)
    assert lookup.status("d").state == "unknown"
    assert store.get_outcome("d") is None


def test_listing_pages_by_range_topic_and_state(env: Env) -> None:
    _store, frontier, ledger, lookup = env
    ledger.apply([_msg(f"m{n:03}", T0 + n * 100, topic="a" if n % 3 else "b") for n in range(300)])
    _deliver(frontier, ledger, T0 + 99 * 100, [])  # m000..m099 delivered
    seen: list[str] = []
    cursor = None
    while True:
        page = lookup.page(PageQuery(topic="b", cursor=cursor, limit=7))
        seen += [str(row["id"]) for row in page.rows]
        assert all(row["topic"] == "b" and row["state"] == "pending" for row in page.rows)
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == [f"m{n:03}" for n in range(100, 300) if n % 3 == 0]
    delivered = lookup.page(PageQuery(state="delivered", from_ms=T0 + 5_000, limit=1_000))
    assert [row["id"] for row in delivered.rows] == [f"m{n:03}" for n in range(50, 100)]
    window = lookup.page(PageQuery(state="any", from_ms=T0 + 9_850, to_ms=T0 + 10_150))
    assert [(row["id"], row["state"]) for row in window.rows] == [
        ("m099", "delivered"),
        ("m100", "pending"),
        ("m101", "pending"),
    ]


def test_a_page_stops_at_the_scan_budget_with_a_cursor(env: Env) -> None:
    _store, _frontier, ledger, lookup = env  # scan_max 1,000
    ledger.apply(
        [_msg(f"a{n:05}", T0 + n, topic="a") for n in range(2_500)] + [_msg("z", T0 + 9_999, "z")]
    )
    page = lookup.page(PageQuery(topic="z"))
    assert page.rows == [] and page.cursor is not None and page.scanned == 1_000
    while not page.rows:
        page = lookup.page(PageQuery(topic="z", cursor=page.cursor))
    assert [row["id"] for row in page.rows] == ["z"]


def test_forecast_counts_per_minute_follow_every_write(env: Env) -> None:
    store, frontier, ledger, lookup = env
    rng = random.Random(7)
    dues = [T0 + rng.randrange(0, 3_600_000) for _ in range(2_000)]
    ledger.apply([_msg(f"early{n}", due) for n, due in enumerate(dues[:1_000])])
    with pytest.raises(NotReady):  # nothing counted before start_due_counts
        lookup.forecast(T0, 3_600, 60)
    store.start_due_counts()
    ledger.apply([_msg(f"late{n}", due) for n, due in enumerate(dues[1_000:])])
    assert store.due_counts.wait_ready(10)
    ledger.apply([CancelRequest("early0"), CancelRequest("late0")])
    expected = dues[1:1_000] + dues[1_001:]
    # Delivery up to 90 s in: the seek's minute is counted by a scan, later minutes by counts.
    seek = T0 + 90_000
    _deliver(frontier, ledger, seek, [])
    pending = [due for due in expected if due > seek]
    forecast = lookup.forecast(T0 + 61_000, 3_600, 300)
    assert forecast.from_ms == T0 + 60_000 and forecast.overdue == 0
    assert len(forecast.counts) == 12
    for n, count in enumerate(forecast.counts):
        low = T0 + 60_000 + n * 300_000
        assert count == sum(1 for due in pending if low <= due < low + 300_000), n
    later = lookup.forecast(T0 + 600_000, 600, 60)  # the node's clock ahead of its seek
    assert later.overdue == sum(1 for due in pending if due < T0 + 600_000)
    assert later.counts[0] == sum(1 for due in pending if T0 + 600_000 <= due < T0 + 660_000)
    with pytest.raises(ValueError):
        lookup.forecast(T0, 3_600, 90)


def test_forecast_counts_the_later_occurrences_of_repeats_in_its_horizon(
    tmp_path: Path, env: Env
) -> None:
    store, _frontier, ledger, lookup = env
    store.start_due_counts()
    every_ten_minutes = Repeat.calendar("*/10 * * * *", "Asia/Kolkata", times=4)  # +05:30
    first = every_ten_minutes.first_due(T0 + 300_000)
    fixed = Repeat(RepeatKind.FIXED, 900_000, 100)
    ledger.apply(
        [
            _msg("cron", first, repeat=every_ten_minutes),
            _msg("fixed", T0 + 60_000, repeat=fixed),
            _msg("once", T0 + 120_000),
        ]
    )
    assert store.due_counts.wait_ready(10)
    assert lookup.forecast(T0, 3_600, 600).repeats == 0, "counts alone unless asked for"
    forecast = lookup.forecast(T0, 3_600, 600, repeats=True)
    dues = [first + k * 600_000 for k in range(4)]  # Kolkata has no DST: every 600 s
    dues += [T0 + 60_000 + k * 900_000 for k in range(4)] + [T0 + 120_000]
    assert forecast.counts == [sum(n * 600_000 <= d - T0 < (n + 1) * 600_000 for d in dues)
                               for n in range(6)]  # fmt: skip
    assert (forecast.repeats, forecast.repeats_complete) == (6, True)  # 3 + 3 after pending
    bounded = Lookup(store, ledger, scan_max=2).forecast(T0, 3_600, 600, repeats=True)
    assert not bounded.repeats_complete


def _delivered_job(key: bytes, partition: int, offset: int) -> DeliveryJob:
    job = DeliveryJob(key, None, keys.slot_of(key), attempts=1, partition=partition, offset=offset)
    job.done = True
    return job


def test_one_shots_are_found_in_outcome_blocks_and_purged_with_their_messages(env: Env) -> None:
    """A node alone's progress keeps one-shot deliveries in blocks (``store/outcome.py``):
    each is found from the key its index holds; a block goes once every message in it was
    purged."""
    store, frontier, ledger, lookup = env
    ledger.apply([_msg(f"m{n}", T0 + 1_000 + n) for n in range(outcome.BLOCK_MAX + 5)])
    ledger.apply([_msg("later", T0 + 9_000)])
    # A repeat of one time has no next occurrence either: its index keeps its key too.
    once = Repeat(RepeatKind.FIXED, 10_000, 1)
    ledger.apply(
        [_msg(f"m{outcome.BLOCK_MAX + 5}", T0 + 1_000 + outcome.BLOCK_MAX + 5, repeat=once)]
    )
    tracker = ProgressTracker(T0, clock=FakeClock(T0 + 5_000), keep_outcomes=True)
    rows = store.scan(b"", keys.slot_bound(T0 + 2_000 + outcome.BLOCK_MAX), 10_000)
    tracker.dispatched([_delivered_job(k, 3, 100 + n) for n, (k, _) in enumerate(rows)])
    tracker.scanned_through(T0 + 2_000 + outcome.BLOCK_MAX)
    seek, cursor, _ = tracker.collect()
    taken = tracker.take_outcomes()
    assert len(taken) == 2  # one block per BLOCK_MAX deliveries, not one record each
    frontier.advance(seek)
    ledger.commit_progress(seek, [], cursor, outcomes=taken)
    for n in (0, outcome.BLOCK_MAX - 1, outcome.BLOCK_MAX, outcome.BLOCK_MAX + 5):
        found = lookup.status(f"m{n}")
        assert (found.state, found.partition, found.offset) == ("delivered", 3, 100 + n)
        assert found.delivered_ms == T0 + 5_000 and found.outcome_recorded
    assert lookup.status("later").state == "pending"
    # Purged up to the first block's last message: that block goes, the second one stays.
    ledger.purge_delivered(T0 + 1_000 + outcome.BLOCK_MAX - 1)
    assert store.get_block_outcome(rows[0][0]) == store.get_block_outcome(rows[-1][0])
    assert lookup.status(f"m{outcome.BLOCK_MAX}").offset == 100 + outcome.BLOCK_MAX


def test_a_block_holds_only_its_own_deliveries() -> None:
    key = keys.message_key(T0, "a")
    ((block_key, value),) = outcome.blocks(T0, [(key, 1, 2), (keys.message_key(T0, "b"), 1, 3)])
    assert block_key == outcome.BLOCK + keys.message_key(T0, "b")
    found = outcome.find_in_block(value, key)
    assert found == outcome.Outcome(T0, 1, 1, 2)
    assert outcome.find_in_block(value, keys.message_key(T0, "c")) is None
    assert outcome.find_in_block(outcome.delivered(T0, 1, 2, 1), key) is None  # not a block


def test_a_cron_repeat_lists_its_next_occurrences_in_its_zone(env: Env) -> None:
    _store, _frontier, ledger, lookup = env
    weekdays = Repeat.calendar("0 9 * * 1-5", "Europe/Berlin", times=4)
    friday = 1_774_598_400_000  # 2026-03-27 09:00 CET, the Friday before the clocks change
    ledger.apply([_msg("w", friday, repeat=weekdays)])
    status = lookup.status("w")
    hour = 3_600_000
    # Monday to Wednesday, 09:00 local: CEST from Sunday on, so an hour less after Friday's.
    assert status.upcoming_ms == [friday + 3 * 24 * hour - hour + k * 24 * hour for k in range(3)]
    assert status.next_due_ms == status.upcoming_ms[0]
    assert status.times == 4


def test_a_moved_occurrence_shows_its_new_due_time_and_the_schedule_after_it(env: Env) -> None:
    """Issue 63: status and forecast of a repeat whose pending occurrence a reschedule moved
    past the next one's due time: due at the requested millisecond, the next one the
    schedule's first after it (occurrence 3 passed over), the rest of the schedule unshifted."""
    store, _frontier, ledger, lookup = env
    store.start_due_counts()
    fixed = Repeat(RepeatKind.FIXED, 600_000, 6)
    second = _msg("r", T0 + 60_000, repeat=fixed)
    second.occurrence = 2  # due T0 + 660,000
    ledger.apply([second])
    ledger.apply([RescheduleRequest("r", T0 + 1_300_007)])  # past occurrence 3 (1,260,000)
    status = lookup.status("r")
    assert (status.occurrence, status.due_ms, status.slot_ms) == (2, T0 + 1_300_007, T0 + 1_300_007)
    assert status.next_due_ms == T0 + 1_860_000  # occurrence 4, the schedule's
    assert status.upcoming_ms == [T0 + 60_000 + k * 600_000 for k in (3, 4, 5)]
    assert store.due_counts.wait_ready(10)
    forecast = lookup.forecast(T0, 3_600, 600, repeats=True)
    dues = [T0 + 1_300_007, T0 + 1_860_000, T0 + 2_460_000, T0 + 3_060_000]
    assert forecast.counts == [sum(n * 600_000 <= d - T0 < (n + 1) * 600_000 for d in dues)
                               for n in range(6)]  # fmt: skip
    assert forecast.repeats == 3

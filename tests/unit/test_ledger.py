"""Ledger on a real RocksDB store: idempotent adds, cancels, progress, purge, tombstones."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chronos.clock import FakeClock
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import CancelRequest, DelayMessage, Refresh
from chronos.node.delete import DeleteWorker
from chronos.node.expiry import ExpiryWriter
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, next_occurrence
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksBatch, RocksStore

T0 = 1_700_000_000_000
TOMBSTONE_S = 60
ALL = b"\xff" * 16  # above every messages key


@dataclass
class Env:
    path: Path
    store: RocksStore
    frontier: Frontier
    clock: FakeClock
    ledger: Ledger

    def messages(self) -> dict[bytes, DelayMessage]:
        return {k: codec.decode(v) for k, v in self.store.scan(b"", ALL, 1_000_000)}

    def slots(self) -> list[tuple[int, str]]:
        return [keys.split_message_key(k) for k, _ in self.store.scan(b"", ALL, 1_000_000)]

    def index(self, message_id: str) -> bytes | None:
        return self.store.get_index([message_id])[0]

    def reopen(self) -> None:
        self.store.close()
        # Drop every reference so RocksDB's LOCK is released (see test_rocks.py: close() alone
        # does not release it while the RocksStore object is alive).
        fresh = _open_env_after_release(self)
        self.store, self.frontier, self.ledger = fresh.store, fresh.frontier, fresh.ledger


def _open_env_after_release(env: Env) -> Env:
    path, clock = env.path, env.clock
    env.store = env.ledger = None  # type: ignore[assignment]
    gc.collect()
    return _open_env(path, clock)


def _open_env(path: Path, clock: FakeClock) -> Env:
    store = RocksStore(path, StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(store.read_seek() or 0)
    ledger = Ledger(store, frontier, clock, DeleteSettings(tombstone_retention_s=TOMBSTONE_S))
    return Env(path, store, frontier, clock, ledger)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = _open_env(tmp_path / "store", FakeClock(T0))
    yield e
    e.store.close()


def _msg(
    message_id: str, due: int, repeat: Repeat | None = None, value: bytes = b"v"
) -> DelayMessage:
    return DelayMessage(message_id, "orders", b"k", value, [("h", b"1")], due, repeat)


def test_add_stores_message_and_index(env: Env) -> None:
    message = _msg("a", T0 + 1000)
    outcome = env.ledger.apply([message])
    assert outcome.added == 1 and outcome.late == 0 and outcome.duplicates == 0
    key = keys.message_key(T0 + 1000, "a")
    assert env.messages() == {key: message}
    assert env.index("a") == keys.index_pending(key)


def test_duplicate_add_keeps_first(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000, value=b"first")])
    outcome = env.ledger.apply([_msg("a", T0 + 5000, value=b"second")])
    assert outcome.duplicates == 1 and outcome.added == 0
    assert env.slots() == [(T0 + 1000, "a")]
    (stored,) = env.messages().values()
    assert stored.value == b"first"


def test_duplicate_add_in_same_batch_keeps_first(env: Env) -> None:
    outcome = env.ledger.apply([_msg("a", T0 + 2000, value=b"first"), _msg("a", T0 + 1000)])
    assert (outcome.added, outcome.duplicates) == (1, 1)
    assert env.slots() == [(T0 + 2000, "a")]


def test_cancel_before_add_stays_cancelled(env: Env) -> None:
    outcome = env.ledger.apply([CancelRequest("a")])
    assert outcome.cancel_unknown == 1
    assert env.index("a") == keys.index_cancelled(T0, keys.CANCEL_UNKNOWN)
    outcome = env.ledger.apply([_msg("a", T0 + 1000)])
    assert outcome.duplicates == 1 and outcome.added == 0
    assert env.slots() == []
    assert env.index("a") == keys.index_cancelled(T0, keys.CANCEL_UNKNOWN)


def test_cancel_pending_removes_it_from_scans(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000), _msg("b", T0 + 2000)])
    env.clock.advance(5)
    outcome = env.ledger.apply([CancelRequest("a")])
    assert outcome.cancelled == 1 and outcome.cancel_raced == 0
    assert env.slots() == [(T0 + 2000, "b")]
    assert env.index("a") == keys.index_cancelled(T0 + 5)
    # cancelling again is a no-op
    outcome = env.ledger.apply([CancelRequest("a")])
    assert outcome.cancelled == 0 and outcome.cancel_unknown == 0
    assert env.index("a") == keys.index_cancelled(T0 + 5)


def test_add_then_cancel_in_same_batch(env: Env) -> None:
    outcome = env.ledger.apply([_msg("a", T0 + 1000), CancelRequest("a")])
    assert outcome.added == 1 and outcome.cancelled == 1
    assert env.slots() == []
    assert env.index("a") == keys.index_cancelled(T0)


def test_cancel_after_frontier_passed_is_raced(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000)])
    env.frontier.advance(T0 + 1500)  # handed to a sender, not yet acknowledged
    outcome = env.ledger.apply([CancelRequest("a")])
    assert outcome.cancel_raced == 1 and outcome.cancelled == 0
    assert env.slots() == []


def test_push_cannot_scan_a_message_while_its_cancel_is_written(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The push worker moving during the cancel's write must not pass the cancelled slot:
    otherwise it could deliver the message while the cancel counts it as cancelled."""
    env.ledger.apply([_msg("a", T0 + 1000)])
    write = env.store.write
    reached: list[int] = []

    def write_while_push_advances(batch: RocksBatch) -> None:
        reached.append(env.frontier.advance(T0 + 5000))  # the push worker, mid-write
        write(batch)

    monkeypatch.setattr(env.store, "write", write_while_push_advances)
    outcome = env.ledger.apply([CancelRequest("a")])
    assert reached == [T0 + 999]
    assert outcome.cancelled == 1 and outcome.cancel_raced == 0
    assert env.frontier.advance(T0 + 5000) == T0 + 5000  # released once written


def test_cancel_after_seek_is_too_late(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000)])
    env.frontier.advance(T0 + 1000)
    env.ledger.commit_progress(T0 + 1000, [])
    outcome = env.ledger.apply([CancelRequest("a")])
    assert outcome.cancel_too_late == 1
    assert outcome.cancelled == outcome.cancel_raced == 0
    key = keys.message_key(T0 + 1000, "a")
    assert env.index("a") == keys.index_pending(key)  # not turned into a tombstone
    assert env.slots() == [(T0 + 1000, "a")]


def test_late_arrival_goes_after_frontier(env: Env) -> None:
    env.frontier.advance(T0 + 5000)
    outcome = env.ledger.apply(
        [_msg("late", T0 + 3000), _msg("edge", T0 + 5000), _msg("ok", T0 + 5001)]
    )
    assert outcome.late == 2 and outcome.added == 3
    assert env.slots() == [(T0 + 5001, "edge"), (T0 + 5001, "late"), (T0 + 5001, "ok")]
    stored = {m.id: m for m in env.messages().values()}
    assert stored["late"].first_due_ms == T0 + 3000  # the due time itself is kept
    assert env.index("late") == keys.index_pending(keys.message_key(T0 + 5001, "late"))


def test_commit_progress_persists_seek(env: Env) -> None:
    assert env.ledger.seek_ms == 0
    env.ledger.commit_progress(T0 + 1234, [])
    assert env.ledger.seek_ms == T0 + 1234
    env.ledger.commit_progress(T0 + 1000, [])  # never back
    assert env.ledger.seek_ms == T0 + 1234
    env.reopen()
    assert env.store.read_seek() == T0 + 1234
    assert env.ledger.seek_ms == T0 + 1234
    assert env.frontier.value == T0 + 1234


def test_commit_progress_writes_followup(env: Env) -> None:
    repeat = Repeat(RepeatKind.FIXED, 1000, 3)
    first = _msg("r", T0 + 1000, repeat)
    env.ledger.apply([first])
    k1 = keys.message_key(T0 + 1000, "r")
    env.frontier.advance(T0 + 1000)
    nxt = next_occurrence(first)
    assert nxt is not None and nxt.occurrence == 2
    env.ledger.commit_progress(T0 + 1000, [(k1, nxt)])
    k2 = keys.message_key(T0 + 2000, "r")
    assert env.index("r") == keys.index_pending(k2)
    assert env.messages()[k2] == nxt
    assert env.store.read_seek() == T0 + 1000

    # a replayed follow-up of the old key is ignored: the index moved on
    third = next_occurrence(nxt)
    assert third is not None
    env.ledger.commit_progress(T0 + 1000, [(k1, third)])
    assert keys.message_key(T0 + 3000, "r") not in env.messages()
    assert env.index("r") == keys.index_pending(k2)


def test_followup_not_written_after_cancel(env: Env) -> None:
    repeat = Repeat(RepeatKind.FIXED, 1000, 3)
    first = _msg("r", T0 + 1000, repeat)
    env.ledger.apply([first])
    env.frontier.advance(T0 + 1000)
    env.ledger.apply([CancelRequest("r")])  # raced: already handed to a sender
    nxt = next_occurrence(first)
    assert nxt is not None
    env.ledger.commit_progress(T0 + 1000, [(keys.message_key(T0 + 1000, "r"), nxt)])
    assert env.slots() == []
    assert env.index("r") == keys.index_cancelled(T0, keys.CANCEL_RACED)
    assert env.store.read_seek() == T0 + 1000


def test_overdue_followup_goes_after_frontier(env: Env) -> None:
    repeat = Repeat(RepeatKind.FIXED, 1000, 3)
    first = _msg("r", T0 + 1000, repeat)
    env.ledger.apply([first])
    env.frontier.advance(T0 + 9000)
    nxt = next_occurrence(first)
    assert nxt is not None
    env.ledger.commit_progress(T0 + 1000, [(keys.message_key(T0 + 1000, "r"), nxt)])
    assert (T0 + 9001, "r") in env.slots()


def test_purge_delivered(env: Env) -> None:
    repeat = Repeat(RepeatKind.FIXED, 10_000, 2)
    r = _msg("r", T0 + 1500, repeat)
    env.ledger.apply([_msg("a", T0 + 1000), _msg("b", T0 + 2000), r, _msg("c", T0 + 3000)])
    env.frontier.advance(T0 + 2500)
    nxt = next_occurrence(r)
    assert nxt is not None
    env.ledger.commit_progress(T0 + 2500, [(keys.message_key(T0 + 1500, "r"), nxt)])

    dropped = env.ledger.purge_delivered(T0 + 2000)
    assert dropped == 3  # a, r@1500, b
    assert env.slots() == [(T0 + 3000, "c"), (T0 + 11_500, "r")]
    assert env.index("a") is None and env.index("b") is None
    assert env.index("r") == keys.index_pending(keys.message_key(T0 + 11_500, "r"))
    assert env.index("c") is not None
    assert env.ledger.purge_delivered(T0 + 2000) == 0


def test_purge_is_clamped_to_seek(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000), _msg("c", T0 + 3000)])
    env.frontier.advance(T0 + 2000)
    env.ledger.commit_progress(T0 + 2000, [])
    assert env.ledger.purge_delivered(T0 + 10**9) == 1
    assert env.slots() == [(T0 + 3000, "c")]
    assert env.index("c") is not None and env.index("a") is None


def test_purge_keeps_tombstones(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000)])
    env.frontier.advance(T0 + 1000)
    env.ledger.apply([CancelRequest("a")])  # raced
    env.ledger.commit_progress(T0 + 1000, [])
    env.ledger.purge_delivered(T0 + 1000)
    assert env.index("a") == keys.index_cancelled(T0, keys.CANCEL_RACED)


def test_expire_tombstones(env: Env) -> None:
    env.ledger.apply([CancelRequest("x")])
    assert env.ledger.expire_tombstones() == 0
    env.clock.advance(TOMBSTONE_S * 1000 - 1)
    assert env.ledger.expire_tombstones() == 0
    assert env.index("x") == keys.index_cancelled(T0, keys.CANCEL_UNKNOWN)
    assert env.ledger.apply([_msg("x", T0 + 10**6)]).duplicates == 1

    env.clock.advance(1)
    assert env.ledger.expire_tombstones() == 1
    assert env.index("x") is None
    assert env.ledger.expire_tombstones() == 0
    # forgotten: a new add of the id is accepted
    assert env.ledger.apply([_msg("x", T0 + 10**6)]).added == 1


def test_expire_keeps_pending_index(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000), CancelRequest("b")])
    env.clock.advance(TOMBSTONE_S * 1000 + 1)
    assert env.ledger.expire_tombstones() == 1
    assert env.index("a") == keys.index_pending(keys.message_key(T0 + 1000, "a"))
    assert env.index("b") is None


def test_is_current(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000)])
    k = keys.message_key(T0 + 1000, "a")
    assert env.ledger.is_current([("a", k), ("a", keys.message_key(T0, "a")), ("z", k)]) == [
        True,
        False,
        False,
    ]


def test_apply_notifies_frontier_of_earliest_slot(env: Env) -> None:
    # b is due in the past, a after the wait's 60 s cap.
    env.ledger.apply([_msg("a", T0 + 120_000), _msg("b", T0 - 10)])
    t = time.monotonic()
    # The pending notification (T0-10 <= now) makes the wait return at once; without it, or
    # with a's slot instead of the earliest, the wait sleeps its whole 60 s cap. The bound is
    # half the cap, not a speed.
    env.frontier.wait(None, T0, 60.0)
    assert time.monotonic() - t < 30.0


def test_next_occurrence() -> None:
    assert next_occurrence(_msg("a", 0)) is None
    m = _msg("r", 0, Repeat(RepeatKind.FIXED, 10, 2))
    n = next_occurrence(m)
    assert n is not None and n.occurrence == 2 and m.occurrence == 1
    assert next_occurrence(n) is None


def _refresh(message: DelayMessage, slot: int) -> Refresh:
    return Refresh(message, slot)


def test_a_refresh_of_an_unknown_id_is_stored_at_its_slot_as_the_delivering_node_had_it(
    env: Env,
) -> None:
    """A rebuilt store: the add's first record is gone. Stored at the slot (not the due time)
    so it is delivered exactly when that node's seek passes it."""
    outcome = env.ledger.apply([_refresh(_msg("a", T0 + 1000), T0 + 1500)])
    assert outcome.refreshed == 1 and outcome.added == 0
    assert env.slots() == [(T0 + 1500, "a")]


def test_a_refresh_of_a_known_or_cancelled_id_changes_nothing(env: Env) -> None:
    env.ledger.apply([_msg("a", T0 + 1000), CancelRequest("c")])
    outcome = env.ledger.apply(
        [_refresh(_msg("a", T0 + 1000, value=b"other"), T0 + 1200), _refresh(_msg("c", T0), T0)]
    )
    assert outcome.refreshed == 0 and outcome.duplicates == 2
    assert env.slots() == [(T0 + 1000, "a")]
    assert env.messages()[keys.message_key(T0 + 1000, "a")].value == b"v"
    assert env.index("c") == keys.index_cancelled(T0, keys.CANCEL_UNKNOWN)


def test_a_refresh_moves_a_repeat_forward_only(env: Env) -> None:
    """A rebuilt store reads the refreshes of several passes, oldest first: each later
    occurrence moves the repeat on; an earlier one never moves it back."""
    repeat = Repeat(RepeatKind.FIXED, interval_ms=1000, times=5)
    second = _msg("r", T0, repeat)
    second.occurrence = 2
    fourth = _msg("r", T0, repeat)
    fourth.occurrence = 4
    env.ledger.apply([_refresh(second, T0 + 1000)])
    env.ledger.apply([_refresh(fourth, T0 + 3000)])
    env.ledger.apply([_refresh(second, T0 + 1000)])
    assert env.slots() == [(T0 + 3000, "r")]
    assert env.messages()[keys.message_key(T0 + 3000, "r")].occurrence == 4


def test_a_node_that_delivers_places_an_unknown_refresh_ahead_of_its_seek_after_the_frontier(
    env: Env,
) -> None:
    """Behind the seek: delivered (stays at its slot). Ahead of the seek but behind the
    frontier: the push scan has passed it, so it goes after the frontier, as a late add."""
    env.ledger.commit_progress(T0, [])
    env.frontier.advance(T0 + 500)
    env.ledger.apply(
        [_refresh(_msg("old", T0 - 10), T0 - 5), _refresh(_msg("mid", T0 + 100), T0 + 200)]
    )
    assert sorted(env.slots()) == [(T0 - 5, "old"), (T0 + 501, "mid")]


def test_deletes_due_counts_what_a_pass_would_forget(env: Env) -> None:
    """What a delete pass spreads its expiry tombstones over: the messages behind the cutoff
    (never past the seek) and the cancel tombstones whose retention ended."""
    env.ledger.apply([_msg("a", T0 + 1000), _msg("b", T0 + 2000), _msg("c", T0 + 3000)])
    env.ledger.apply([CancelRequest("x"), CancelRequest("y")])
    env.frontier.advance(T0 + 2500)
    env.ledger.commit_progress(T0 + 2500, [])
    assert env.ledger.deletes_due(T0 + 1000) == 1
    assert env.ledger.deletes_due(T0 + 10**9) == 2  # c is not delivered yet
    env.clock.advance(TOMBSTONE_S * 1000)
    assert env.ledger.deletes_due(T0 + 10**9) == 4
    assert env.ledger.purge_delivered(T0 + 10**9) + env.ledger.expire_tombstones() == 4
    assert env.ledger.deletes_due(T0 + 10**9) == 0


def test_a_delete_pass_counts_what_it_forgets_only_when_its_tombstones_go_out(env: Env) -> None:
    """A backup's delete worker forgets ids too but writes no tombstones: it must not scan its
    store to pace them (mutant caught: counting on every node, a second scan per pass)."""
    delivering = {"now": False}
    counted: list[int] = []

    class Recording(ExpiryWriter):
        def spread(self, count: int, seconds: float) -> None:
            counted.append(count)

    writer = Recording(
        publisher=StubPublisher(auto=True),
        inner_topic="inner",
        partition=lambda _: 0,
        delivering=lambda: delivering["now"],
        rate=10**9,
        metrics=CountingMetrics(),
    )
    env.ledger.apply([_msg("a", T0 + 1000), _msg("b", T0 + 1500), _msg("c", T0 + 9000)])
    env.frontier.advance(T0 + 2000)
    env.ledger.commit_progress(T0 + 2000, [])
    DeleteWorker(env.ledger, DeleteSettings(retention_s=0), writer).run_once()
    assert counted == []
    env.ledger.apply([_msg("d", T0 + 5000)])
    env.frontier.advance(T0 + 6000)
    env.ledger.commit_progress(T0 + 6000, [])
    delivering["now"] = True
    DeleteWorker(env.ledger, DeleteSettings(retention_s=0), writer).run_once()
    assert counted == [1]  # d: a and b went in the first pass, c is not delivered yet

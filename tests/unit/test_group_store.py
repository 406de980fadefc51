"""The replica-group store rules on a real RocksDB: the frontier's cut, follower placement,
committed progress applied to a backup, and the takeover's relocation (chronos/group/)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chronos.clock import FakeClock
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.model import DelayMessage, Op
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import RepeatState
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
ALL = b"\xff" * 16


class Replica:
    """A store, frontier and ledger as one replica of a group holds them."""

    def __init__(self, path: Path, leading: bool) -> None:
        self.store = RocksStore(path, StoreSettings(wal_sync_interval_ms=60_000))
        self.frontier = Frontier(0)
        placement = ReplicaPlacement()
        placement.leading = leading
        self.ledger = Ledger(self.store, self.frontier, FakeClock(T0), DeleteSettings(), placement)
        self.replica = ReplicaStore(self.store, self.frontier, self.ledger, placement)

    def add(self, message: DelayMessage, partition: int, offset: int) -> None:
        item = (Op.ADD, message.id, message.first_due_ms, codec.encode(message))
        self.ledger.apply_decoded([item], {partition: offset + 1}, [(partition, offset)])

    def cancel(self, message_id: str, partition: int, offset: int) -> None:
        self.ledger.apply_decoded([(Op.CANCEL, message_id, 0, None)], {partition: offset + 1}, [])

    def slots(self) -> dict[str, int]:
        rows = self.store.scan(b"", ALL, 10**6)
        return {keys.split_message_key(k)[1]: keys.slot_of(k) for k, _ in rows}

    def delivered_through(self, seek: int) -> set[str]:
        return {i for i, slot in self.slots().items() if slot <= seek}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Replica, Replica]]:
    master, backup = Replica(tmp_path / "m", True), Replica(tmp_path / "b", False)
    yield master, backup
    master.store.close()
    backup.store.close()


def _msg(message_id: str, due: int, repeat: Repeat | None = None) -> DelayMessage:
    return DelayMessage(message_id, "orders", b"k", b"v", [], due, repeat)


def test_the_cut_says_what_is_behind_the_frontier_by_offsets_and_due_times_alone(
    pair: tuple[Replica, Replica],
) -> None:
    """Random adds (many overdue) and frontier moves: after each move, the master's messages
    at slots <= F are exactly the adds below the cut's offsets with due <= F."""
    master, _ = pair
    rng = random.Random(7)
    origin: dict[str, tuple[int, int, int]] = {}  # id -> (partition, offset, due)
    offsets = {0: 0, 1: 0}
    now = T0
    for step in range(400):
        now += rng.randint(0, 40)
        if rng.random() < 0.7:
            partition = rng.randint(0, 1)
            message_id = f"m{step}"
            due = now + rng.randint(-200, 300)
            master.add(_msg(message_id, due), partition, offsets[partition])
            origin[message_id] = (partition, offsets[partition], due)
            offsets[partition] += 1
        else:
            master.frontier.advance(now)
            seek, cut = master.frontier.cut()
            expected = {i for i, (p, o, due) in origin.items() if o < cut.get(p, 0) and due <= seek}
            assert master.delivered_through(seek) == expected


def test_a_backup_places_adds_at_their_due_time_and_applies_every_cancel(
    pair: tuple[Replica, Replica],
) -> None:
    master, backup = pair
    for replica in pair:
        replica.replica.apply_cut(T0 + 5000, [], {})
    backup.frontier.advance(T0 + 5000)  # as a demoted master's frontier stands
    backup.add(_msg("overdue", T0 + 1000), 0, 0)
    backup.add(_msg("ahead", T0 + 9000), 0, 1)
    assert backup.slots() == {"overdue": T0 + 1000, "ahead": T0 + 9000}
    # A master places an overdue add after its frontier and refuses a cancel behind its seek.
    master.frontier.advance(T0 + 5000)
    master.add(_msg("overdue", T0 + 1000), 0, 0)
    assert master.slots() == {"overdue": T0 + 5001}
    backup.cancel("overdue", 0, 2)
    assert "overdue" not in backup.slots()


def test_takeover_moves_what_the_cut_does_not_cover_past_the_seek(
    pair: tuple[Replica, Replica],
) -> None:
    _, backup = pair
    backup.add(_msg("covered-due", T0 + 1000), 0, 0)  # delivered by the old master
    backup.add(_msg("covered-ahead", T0 + 9000), 0, 1)  # not due yet
    backup.add(_msg("uncovered-due", T0 + 1500), 0, 2)  # the old master never stored it
    backup.add(_msg("other-partition", T0 + 2000), 1, 0)  # no cut offset for partition 1
    seek, cut = T0 + 5000, {0: 2}
    backup.replica.apply_cut(seek, [], cut)
    assert backup.replica.lead(seek, [0, 1]) == seek
    moved = backup.replica.relocate_uncovered(seek, cut, [0, 1])
    assert moved == 2
    assert backup.slots() == {
        "covered-due": T0 + 1000,
        "covered-ahead": T0 + 9000,
        "uncovered-due": seek + 1,
        "other-partition": seek + 1,
    }
    # New adds are placed as a master places them.
    backup.add(_msg("late", T0 + 10), 0, 3)
    assert backup.slots()["late"] == seek + 1


def test_applied_progress_forgets_covered_arrivals(pair: tuple[Replica, Replica]) -> None:
    _, backup = pair
    backup.add(_msg("a", T0 + 1000), 0, 0)
    backup.add(_msg("b", T0 + 1000), 0, 1)
    backup.replica.apply_cut(T0 + 5000, [], {0: 1})
    rows = backup.store.scan_arrivals(b"", b"\xff" * 12, 100)
    assert [keys.split_arrival_key(k) for k, _ in rows] == [(0, 1)]


def test_a_backup_follows_repeat_states_forward_only(pair: tuple[Replica, Replica]) -> None:
    _, backup = pair
    repeat = Repeat(RepeatKind.FIXED, interval_ms=10_000, times=3)
    first = _msg("r", T0 + 1000, repeat)
    backup.add(first, 0, 0)
    second = replace(first, occurrence=2)
    state = RepeatState("r", second, T0 + 11_000)
    backup.replica.apply_cut(T0 + 2000, [state], {0: 1})
    assert backup.slots() == {"r": T0 + 11_000}
    stored = codec.decode(backup.store.scan(b"", ALL, 10)[0][1])
    assert stored.occurrence == 2
    # An older state (a record read again) does not move it back.
    backup.replica.apply_cut(T0 + 2000, [RepeatState("r", first, T0 + 1000)], {0: 1})
    assert backup.slots() == {"r": T0 + 11_000}
    # A cancelled repeat is not revived by a later state.
    backup.cancel("r", 0, 1)
    third = replace(first, occurrence=3)
    backup.replica.apply_cut(T0 + 12_000, [RepeatState("r", third, T0 + 21_000)], {0: 2})
    assert backup.slots() == {}


def test_a_follower_and_its_master_agree_on_what_was_delivered(
    pair: tuple[Replica, Replica],
) -> None:
    """The same inner records, read by both at different times: after the backup applies the
    master's cut and takes over, its store says "delivered" for exactly the master's set."""
    master, backup = pair
    rng = random.Random(11)
    records = []
    now = T0
    for n in range(300):
        now += rng.randint(0, 30)
        records.append((_msg(f"m{n}", now + rng.randint(-150, 250)), n))
    cursor = 0
    for message, offset in records:
        master.add(message, 0, offset)
        if rng.random() < 0.2:
            master.frontier.advance(message.first_due_ms - 100)
        # The backup lags or leads the master at random.
        while cursor < len(records) and rng.random() < 0.5:
            backup.add(records[cursor][0], 0, records[cursor][1])
            cursor += 1
    seek, cut = master.frontier.cut()
    for message, offset in records[cursor:]:
        backup.add(message, 0, offset)
    backup.replica.apply_cut(seek, [], cut)
    backup.replica.lead(seek, [0])
    backup.replica.relocate_uncovered(seek, cut, [0])
    assert backup.delivered_through(seek) == master.delivered_through(seek)
    assert set(backup.slots()) == set(master.slots())


def test_a_backup_keeps_a_covered_delivered_add_on_cancel_and_removes_an_uncovered_one(
    pair: tuple[Replica, Replica],
) -> None:
    """Behind a backup's seek, an add the applied progress covers was delivered (a cancel is
    too late, as on the master); one the master received after its cut may not have been
    (placed after the master's frontier), and the cancel must win. Mutants caught: every
    cancel behind the seek kept (the uncovered add delivered after a takeover despite its
    cancel); every one deleted (the backup says "cancelled" for what was delivered)."""
    _, backup = pair
    backup.add(_msg("covered", T0 + 1_000), 0, 0)
    backup.add(_msg("after-cut", T0 + 1_500), 0, 1)
    backup.replica.apply_cut(T0 + 2_000, [], {0: 1})  # the cut covers offset 0 only
    backup.cancel("covered", 0, 2)
    backup.cancel("after-cut", 0, 3)
    assert backup.store.get_index(["covered"])[0] == keys.index_pending(
        keys.message_key(T0 + 1_000, "covered")
    )
    tombstone = backup.store.get_index(["after-cut"])[0]
    entry = keys.read_index(tombstone)
    assert isinstance(entry, keys.Cancelled) and entry.how == keys.CANCEL_FOLLOWER
    assert backup.slots() == {"covered": T0 + 1_000}

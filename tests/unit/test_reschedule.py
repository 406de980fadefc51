"""Reschedule on a real RocksDB store: what the node that delivers decides, what a follower
defers to the master's progress, and what a replica taking over decides again (the rules of
``Ledger._reschedule`` and ``ReplicaStore.relocate_uncovered``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chronos import wire
from chronos.clock import FakeClock
from chronos.delivery.job import jobs_for
from chronos.errors import DecodeError
from chronos.group.follower import Follower
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.inner import accept_inner
from chronos.model import (
    CancelRequest,
    DelayMessage,
    Op,
    RescheduleRequest,
)
from chronos.names import TopicNames
from chronos.node.cut_publisher import _newer_moves
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, Move, next_occurrence
from chronos.schedule.progress_record import Cut, RepeatState
from chronos.settings import DeleteSettings, LimitSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
ALL = b"\xff" * 16


class Node:
    """A store, frontier and ledger: alone (``placement`` None) or one replica of a group."""

    def __init__(self, path: Path, placement: ReplicaPlacement | None = None) -> None:
        self.store = RocksStore(path, StoreSettings(wal_sync_interval_ms=60_000))
        self.frontier = Frontier(0)
        if placement is None:
            self.ledger = Ledger(self.store, self.frontier, FakeClock(T0), DeleteSettings())
        else:
            self.ledger = Ledger(
                self.store, self.frontier, FakeClock(T0), DeleteSettings(), placement
            )
            self.replica = ReplicaStore(self.store, self.frontier, self.ledger, placement)

    def add(self, message: DelayMessage, offset: int) -> None:
        item = (Op.ADD, message.id, message.first_due_ms, codec.encode(message))
        self.ledger.apply_decoded([item], {0: offset + 1}, [(0, offset)])

    def reschedule(self, message_id: str, due: int, offset: int) -> None:
        request = (Op.RESCHEDULE, message_id, due, None)
        self.ledger.apply_decoded([request], {0: offset + 1}, [(0, offset)])

    def stored(self) -> dict[str, tuple[int, DelayMessage]]:
        """id -> (slot, message) of everything stored."""
        rows = self.store.scan(b"", ALL, 10**6)
        return {keys.split_message_key(k)[1]: (keys.slot_of(k), codec.decode(v)) for k, v in rows}

    def slots(self) -> dict[str, int]:
        return {i: slot for i, (slot, _m) in self.stored().items()}


def _msg(message_id: str, due: int, repeat: Repeat | None = None) -> DelayMessage:
    return DelayMessage(message_id, "orders", b"k", b"v", [("h", b"1")], due, repeat)


@pytest.fixture
def alone(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path / "alone")
    yield node
    node.store.close()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    leading = ReplicaPlacement()
    leading.leading = True
    master, backup = Node(tmp_path / "m", leading), Node(tmp_path / "b", ReplicaPlacement())
    yield master, backup
    master.store.close()
    backup.store.close()


def test_the_wire_round_trips_a_reschedule_and_the_node_checks_its_due_time() -> None:
    key, value, headers = wire.encode_reschedule("order-7", T0 + 5000)
    assert (key, value) == (b"order-7", None)
    assert wire.decode(value, headers) == RescheduleRequest("order-7", T0 + 5000)
    limits, names = LimitSettings(), TopicNames()
    assert accept_inner(key, value, headers, limits, names, T0) == RescheduleRequest(
        "order-7", T0 + 5000
    )
    far = T0 + limits.max_delay_s * 1000 + 86_400_000
    with pytest.raises(DecodeError, match="deliver_at"):
        accept_inner(key, *wire.encode_reschedule("order-7", far)[1:], limits, names, T0)
    no_due = [h for h in headers if h[0] != wire.H_DUE]
    with pytest.raises(DecodeError, match="chronos-due-ms"):
        wire.decode(None, no_due)


def test_a_pending_message_moves_later_or_earlier_and_its_index_follows(alone: Node) -> None:
    alone.ledger.apply([_msg("later", T0 + 5000), _msg("sooner", T0 + 9000)])
    outcome = alone.ledger.apply(
        [RescheduleRequest("later", T0 + 60_000), RescheduleRequest("sooner", T0 + 2000)]
    )
    assert (outcome.rescheduled, outcome.reschedule_too_late) == (2, 0)
    stored = alone.stored()
    assert {i: slot for i, (slot, _m) in stored.items()} == {
        "later": T0 + 60_000,
        "sooner": T0 + 2000,
    }
    assert stored["later"][1].due_ms == T0 + 60_000
    assert stored["later"][1].value == b"v" and stored["later"][1].headers == [("h", b"1")]
    index = alone.store.get_index(["later"])[0]
    assert index == keys.index_pending(keys.message_key(T0 + 60_000, "later"))
    moves = alone.ledger.moves()
    assert {i: move.slot_ms for i, move in moves.items()} == {
        "later": T0 + 60_000,
        "sooner": T0 + 2000,
    }


def test_a_repeat_moves_its_pending_occurrence_alone_and_keeps_its_schedule(alone: Node) -> None:
    """Issue 63: the moved occurrence is due (and reports) the requested millisecond; the
    schedule stays, the occurrences at or before the new time passed over."""
    repeat = Repeat(RepeatKind.FIXED, 10_000, 4)
    message = _msg("r", T0 + 1000, repeat)
    message.occurrence = 2  # the first was delivered
    alone.ledger.apply([message])
    assert alone.slots() == {"r": T0 + 11_000}
    alone.ledger.apply([RescheduleRequest("r", T0 + 15_007)])
    ((slot, moved),) = alone.stored().values()
    assert (slot, moved.occurrence, moved.due_ms) == (T0 + 15_007, 2, T0 + 15_007)
    assert (moved.first_due_ms, moved.scheduled_due_ms) == (T0 + 1000, T0 + 11_000)
    following = next_occurrence(moved)
    assert following is not None
    assert (following.occurrence, following.due_ms, following.moved_due_ms) == (3, T0 + 21_000, 0)
    # Moved again, onto occurrence 4's due time: 3 and 4 (the last) are passed over.
    alone.ledger.apply([RescheduleRequest("r", T0 + 31_000)])
    ((slot, moved),) = alone.stored().values()
    assert (slot, moved.occurrence, moved.due_ms) == (T0 + 31_000, 2, T0 + 31_000)
    assert next_occurrence(moved) is None
    # Earlier than the schedule put it: the next one is the schedule's next.
    alone.ledger.apply([RescheduleRequest("r", T0 + 2_000)])
    ((slot, moved),) = alone.stored().values()
    following = next_occurrence(moved)
    assert (slot, moved.due_ms) == (T0 + 2_000, T0 + 2_000)
    assert following is not None and (following.occurrence, following.due_ms) == (3, T0 + 21_000)


def test_a_cron_repeats_moved_occurrence_reports_its_new_time_not_a_fire_after_a_shifted_start(
    alone: Node,
) -> None:
    """The issue's case: every 10 s, occurrence 2 (07:56:50) moved to 07:57:03.007. It
    reported 07:57:00.000 (the fire after a first due time shifted by the move) and
    occurrence 3 came 7 s after it; now it is due 07:57:03.007 and occurrence 3 (07:57:00)
    is passed over for occurrence 4 at 07:57:10, the schedule's."""
    fire = 1_795_852_600_000  # 2026-11-28 07:56:40 UTC
    repeat = Repeat.calendar("*/10 * * * * *", "UTC", times=5)
    message = _msg("c", fire, repeat)
    message.occurrence = 2
    assert message.due_ms == fire + 10_000
    alone.ledger.apply([message])
    alone.ledger.apply([RescheduleRequest("c", fire + 23_007)])
    ((slot, moved),) = alone.stored().values()
    assert (slot, moved.due_ms, moved.first_due_ms) == (fire + 23_007, fire + 23_007, fire)
    jobs = jobs_for(
        [(keys.message_key(slot, "c"), codec.encode(moved))], fire + 23_007, alone.ledger
    )
    (job,) = jobs
    assert (job.due_ms, job.skipped) == (fire + 23_007, 0)
    headers = dict(wire.delivery_headers(moved, job.due_ms, job.skipped))
    assert headers[wire.H_DUE] == b"%d" % (fire + 23_007)
    assert job.followup is not None
    assert (job.followup.occurrence, job.followup.due_ms) == (4, fire + 30_000)
    assert job.followup.moved_due_ms == 0


def test_a_message_the_frontier_passed_is_too_late_and_stays(alone: Node) -> None:
    alone.ledger.apply([_msg("due", T0 + 1000), _msg("ahead", T0 + 9000)])
    alone.frontier.advance(T0 + 5000)  # "due" is being delivered (or was)
    outcome = alone.ledger.apply(
        [RescheduleRequest("due", T0 + 60_000), RescheduleRequest("ahead", T0 + 3000)]
    )
    assert (outcome.rescheduled, outcome.reschedule_too_late) == (1, 1)
    # Moved to the past of the frontier: after it, as an add received now.
    assert alone.slots() == {"due": T0 + 1000, "ahead": T0 + 5001}


def test_an_unknown_or_cancelled_id_is_not_revived(alone: Node) -> None:
    alone.ledger.apply([_msg("c", T0 + 9000), CancelRequest("c")])
    outcome = alone.ledger.apply(
        [RescheduleRequest("c", T0 + 3000), RescheduleRequest("never", T0 + 3000)]
    )
    assert (outcome.rescheduled, outcome.reschedule_unknown) == (0, 2)
    assert alone.slots() == {}
    assert alone.ledger.moves() == {}


def test_an_add_and_its_reschedules_in_one_batch(alone: Node) -> None:
    outcome = alone.ledger.apply(
        [
            _msg("a", T0 + 9000),
            RescheduleRequest("a", T0 + 20_000),
            RescheduleRequest("a", T0 + 4000),
        ]
    )
    assert (outcome.added, outcome.rescheduled) == (1, 2)
    assert alone.slots() == {"a": T0 + 4000}
    assert alone.stored()["a"][1].value == b"v"


def test_published_moves_are_forgotten_unless_moved_again(alone: Node) -> None:
    alone.ledger.apply([_msg("a", T0 + 9000), _msg("b", T0 + 9000)])
    alone.ledger.apply([RescheduleRequest("a", T0 + 20_000), RescheduleRequest("b", T0 + 20_000)])
    published = alone.ledger.moves()
    alone.ledger.apply([RescheduleRequest("b", T0 + 30_000)])  # after the snapshot
    alone.ledger.forget_moves(published)
    assert {i: m.slot_ms for i, m in alone.ledger.moves().items()} == {"b": T0 + 30_000}


def test_a_node_alone_publishes_moves_after_the_repeats_they_are_newer_than() -> None:
    repeat = Repeat(RepeatKind.FIXED, 10_000, 5)
    third = _msg("r", T0, repeat)
    third.occurrence = 3
    second = _msg("r", T0 + 500, repeat)
    second.occurrence = 2
    committed = [RepeatState("r", third, T0 + 20_000)]
    # A move of occurrence 2 was made before occurrence 3 was committed: it is stale.
    assert _newer_moves({"r": Move(second, T0 + 10_500, None)}, committed) == []
    moved_third = _msg("r", T0 + 7000, repeat)
    moved_third.occurrence = 3
    assert _newer_moves({"r": Move(moved_third, T0 + 27_000, None)}, committed) == [
        RepeatState("r", moved_third, T0 + 27_000)
    ]


def test_a_follower_defers_to_the_masters_progress(pair: tuple[Node, Node]) -> None:
    master, backup = pair
    for node in pair:
        node.add(_msg("a", T0 + 9000), 0)
        node.reschedule("a", T0 + 30_000, 1)
    assert master.slots() == {"a": T0 + 30_000}
    # The backup keeps the message where it was until committed progress says where it went.
    assert backup.slots() == {"a": T0 + 9000}
    moves = master.ledger.moves()
    # Published only under a cut that covers the reschedule's record (offset 1).
    assert not moves["a"].covered_by({0: 1}) and moves["a"].covered_by({0: 2})
    states = [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()]
    backup.replica.apply_cut(T0 + 1000, states, {0: 2})
    assert backup.stored() == master.stored()
    # An old state (same occurrence, same due time) applied again moves nothing back.
    original = RepeatState("a", _msg("a", T0 + 30_000), T0 + 30_000)
    backup.replica.apply_cut(T0 + 1000, [original], {0: 2})
    assert backup.slots() == {"a": T0 + 30_000}


def test_takeover_decides_again_what_the_old_master_never_committed(
    pair: tuple[Node, Node],
) -> None:
    """The backup holds reschedules the committed progress does not cover: one of a message
    that progress delivered (too late), one of a message not due yet, one of an add the old
    master never stored: the new master decides each as its store now says."""
    _, backup = pair
    backup.add(_msg("delivered", T0 + 1000), 0)  # covered and due: delivered
    backup.add(_msg("ahead", T0 + 9000), 1)  # covered, not due
    backup.reschedule("delivered", T0 + 60_000, 2)
    backup.reschedule("ahead", T0 + 20_000, 3)
    backup.add(_msg("uncovered", T0 + 1500), 4)  # the old master never stored it
    backup.reschedule("uncovered", T0 + 40_000, 5)
    assert backup.slots() == {"delivered": T0 + 1000, "ahead": T0 + 9000, "uncovered": T0 + 1500}
    seek, cut = T0 + 5000, {0: 2}
    backup.replica.apply_cut(seek, [], cut)
    backup.replica.lead(seek, [0])
    moved = backup.replica.relocate_uncovered(seek, cut, [0])
    assert moved == 1  # "uncovered", before its reschedule moved it again
    assert backup.slots() == {
        "delivered": T0 + 1000,
        "ahead": T0 + 20_000,
        "uncovered": T0 + 40_000,
    }
    moves = backup.ledger.moves()
    assert {i: m.origin for i, m in moves.items()} == {"ahead": (0, 3), "uncovered": (0, 5)}


def test_a_later_reschedule_in_flight_at_the_cut_does_not_hide_a_covered_one(
    pair: tuple[Node, Node],
) -> None:
    """The cut covers R1 (postponed past the cut's frontier) but not R2: R1's move must go
    out with it, or the backup keeps the message behind the seek, where it counts as
    delivered, and a takeover before the next commit loses it."""
    master, backup = pair
    due = T0 + 5000
    for node in pair:
        node.add(_msg("x", due), 0)
        node.reschedule("x", T0 + 60_000, 1)
    master.frontier.advance(due + 100)
    upto, covered = master.frontier.cut()
    assert covered == {0: 2}
    for node in pair:
        node.reschedule("x", T0 + 90_000, 2)  # applied after the cut
    moves = master.ledger.moves(covered)
    assert {i: m.origin for i, m in moves.items()} == {"x": (0, 1)}
    backup.replica.apply_cut(
        upto, [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()], covered
    )
    master.ledger.forget_moves(moves)
    assert {i: m.origin for i, m in master.ledger.moves().items()} == {"x": (0, 2)}
    # The master dies before its next commit: the backup takes over and replays R2.
    seek = backup.replica.lead(upto, [0])
    backup.replica.relocate_uncovered(seek, covered, [0])
    assert backup.slots() == {"x": T0 + 90_000}


def test_a_demoted_master_forgets_its_uncommitted_moves_and_follows_the_new_masters(
    pair: tuple[Node, Node],
) -> None:
    a, b = pair  # a leads, b follows
    for node in pair:
        node.add(_msg("x", T0 + 9000), 0)
    a.frontier.advance(T0 + 100)
    upto, covered = a.frontier.cut()
    b.replica.apply_cut(upto, [], covered)
    for node in pair:
        node.reschedule("x", T0 + 60_000, 1)  # a moves it and is fenced before committing
    a.replica.follow()
    assert a.ledger.moves() == {}
    b.replica.lead(upto, [0])
    b.replica.relocate_uncovered(upto, covered, [0])  # b decides it again: moved
    for node in pair:
        node.reschedule("x", T0 + 30_000, 2)  # b moves it again; a defers
    b.frontier.advance(T0 + 300)
    upto, covered = b.frontier.cut()
    moves = b.ledger.moves(covered)
    a.replica.apply_cut(
        upto, [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()], covered
    )
    assert a.slots() == b.slots() == {"x": T0 + 30_000}


def test_a_reschedule_in_the_batch_of_an_ignored_duplicate_add_moves_the_first_add(
    alone: Node,
) -> None:
    first = _msg("x", T0 + 9000)
    duplicate = DelayMessage(
        "x", "other", None, b"DUP", [], T0 + 8000, Repeat(RepeatKind.FIXED, 1000, 50)
    )
    outcome = alone.ledger.apply([first, duplicate, RescheduleRequest("x", T0 + 20_000)])
    assert (outcome.duplicates, outcome.rescheduled) == (1, 1)
    ((slot, moved),) = alone.stored().values()
    assert (slot, moved.topic, moved.value, moved.repeat) == (T0 + 20_000, "orders", b"v", None)


def test_a_repeat_rescheduled_to_the_epoch_is_delivered_now_not_refused(alone: Node) -> None:
    """``deliver_at_ms: 0`` means "now" (a moved due time of 1 ms: 0 says "not moved"); when a
    reschedule shifted the first due time, a third occurrence's went below 1970, which the
    store cannot hold (the batch failed every retry)."""
    repeat = Repeat(RepeatKind.FIXED, 86_400_000, 5)
    message = _msg("r", T0 + 1000, repeat)
    message.occurrence = 3
    alone.ledger.apply([message])
    alone.frontier.advance(T0)
    outcome = alone.ledger.apply([RescheduleRequest("r", 0)])
    assert outcome.rescheduled == 1
    ((slot, moved),) = alone.stored().values()
    assert (slot, moved.occurrence, moved.moved_due_ms) == (T0 + 1, 3, 1)
    assert moved.first_due_ms == T0 + 1000, "the schedule stays"
    following = next_occurrence(moved)
    assert following is not None
    assert (following.occurrence, following.due_ms) == (4, T0 + 1000 + 3 * 86_400_000)


def _commit(leader: Node, followers: list[Node], upto: int) -> tuple[int, dict[int, int]]:
    """One committed transaction of ``leader`` up to ``upto``: its cut, the moves the cut
    covers published as states, applied by ``followers`` and forgotten by the leader (as
    ``TransactionLoop._transact`` does after Kafka's commit)."""
    leader.frontier.advance(upto)
    seek, covered = leader.frontier.cut()
    moves = leader.ledger.moves(covered)
    states = [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()]
    leader.replica.apply_cut(seek, [], covered)
    leader.ledger.forget_moves(moves)
    for node in followers:
        node.replica.apply_cut(seek, states, covered)
    return seek, covered


def test_a_backup_takes_a_moved_repeat_occurrence_from_the_progress_record(
    pair: tuple[Node, Node],
) -> None:
    """A repeat's moved occurrence travels in the master's progress (its stored encoding,
    flag 16): the backup holds it at the new time with the schedule unshifted, and a state
    of the same occurrence not moved, at the same slot, is news to it (``_not_newer``)."""
    master, backup = pair
    repeat = Repeat.calendar("*/10 * * * * *", "UTC", times=5)
    fire = 1_795_852_600_000
    for node in pair:
        node.add(_msg("c", fire, repeat), 0)
        node.reschedule("c", fire + 3_007, 1)
    _commit(master, [backup], fire - 1)
    assert backup.stored() == master.stored()
    ((slot, held),) = backup.stored().values()
    assert (slot, held.due_ms, held.first_due_ms, held.occurrence) == (
        fire + 3_007,
        fire + 3_007,
        fire,
        1,
    )
    # Back to its scheduled time (a later move), at the slot it has: a different state.
    back = _msg("c", fire, repeat)
    backup.replica.apply_cut(fire - 1, [RepeatState("c", back, fire + 3_007)], {0: 2})
    ((slot, held),) = backup.stored().values()
    assert (slot, held.moved_due_ms, held.due_ms) == (fire + 3_007, 0, fire)


def _pending(node: Node) -> dict[str, int]:
    """What the node would still deliver: id -> slot of every message past its seek."""
    seek = node.replica.seek_ms
    return {i: slot for i, slot in node.slots().items() if slot > seek}


def test_a_master_that_retakes_decides_its_uncommitted_reschedule_again_and_publishes_it(
    pair: tuple[Node, Node],
) -> None:
    """Issue 59's first trail: the master moves a message, is fenced before a commit carries
    the move, and takes over again: its next cuts cover the reschedule's record, so they must
    carry the move, or the backup keeps the message at its first due time (and delivers it
    there after a failover, while this store delivers it again at the new one)."""
    a, b = pair
    for node in pair:
        node.add(_msg("x", T0 + 9000), 0)
    seek, covered = _commit(a, [b], T0 + 100)
    for node in pair:
        node.reschedule("x", T0 + 60_000, 1)
    assert a.slots() == {"x": T0 + 60_000} and b.slots() == {"x": T0 + 9000}
    a.replica.follow()  # fenced before a commit carried the move
    assert a.slots() == b.slots() == {"x": T0 + 9000}
    seek = a.replica.lead(seek, [0])  # the retake
    a.replica.relocate_uncovered(seek, covered, [0])
    assert a.slots() == {"x": T0 + 60_000}
    _commit(a, [b], T0 + 200)
    assert b.slots() == a.slots() == {"x": T0 + 60_000}
    assert a.ledger.moves() == {}


def test_a_demoted_master_holds_what_the_successor_committed_when_it_passed_the_first_slot(
    pair: tuple[Node, Node],
) -> None:
    """Issue 59's second trail: the old master moved the message (uncommitted); its successor
    read the reschedule only after its frontier passed the first slot (too late) and
    delivered it there. The old master, following, must count it delivered, and a later
    term of it must not deliver it again at the new due time."""
    a, b = pair
    for node in pair:
        node.add(_msg("x", T0 + 9000), 0)
    seek, covered = _commit(a, [b], T0 + 100)
    a.reschedule("x", T0 + 60_000, 1)  # the zombie moves it
    assert a.slots() == {"x": T0 + 60_000}
    seek = b.replica.lead(seek, [0])  # the successor, before it read the reschedule
    b.replica.relocate_uncovered(seek, covered, [0])
    b.frontier.advance(T0 + 10_000)  # delivering the first slot
    b.reschedule("x", T0 + 60_000, 1)  # too late for it
    assert b.slots() == {"x": T0 + 9000}
    a.replica.follow()  # fenced
    seek, covered = _commit(b, [a], T0 + 10_000)
    assert _pending(a) == _pending(b) == {}
    # The successor dies; the old master leads again: nothing left to deliver.
    seek = a.replica.lead(seek, [0])
    a.replica.relocate_uncovered(seek, covered, [0])
    assert _pending(a) == {}


def test_a_start_after_a_crash_undoes_the_moves_of_the_term_it_died_in(tmp_path: Path) -> None:
    """kill -9 of a master that moved a message: the journal (written with the move) puts it
    back when the restarted replica follows, and the reschedule is decided again when it
    leads."""
    leading = ReplicaPlacement()
    leading.leading = True
    a = Node(tmp_path / "a", leading)
    a.add(_msg("x", T0 + 9000), 0)
    a.frontier.advance(T0 + 100)
    seek, covered = a.frontier.cut()
    a.replica.apply_cut(seek, [], covered)
    a.reschedule("x", T0 + 60_000, 1)
    a.store.close()  # the crash: nothing published
    restarted = Node(tmp_path / "a", ReplicaPlacement())
    try:
        restarted.replica.follow()  # what ``Replica.start`` does first
        assert restarted.slots() == {"x": T0 + 9000}
        assert restarted.stored()["x"][1].first_due_ms == T0 + 9000
        assert restarted.store.scan_undo(10) == []
        seek = restarted.replica.lead(seek, [0])
        restarted.replica.relocate_uncovered(seek, covered, [0])
        assert restarted.slots() == {"x": T0 + 60_000}
        assert {i: m.origin for i, m in restarted.ledger.moves().items()} == {"x": (0, 1)}
    finally:
        restarted.store.close()


def test_the_undo_returns_to_the_last_published_move_and_never_revives_a_cancel(
    pair: tuple[Node, Node],
) -> None:
    a, b = pair
    for node in pair:
        node.add(_msg("x", T0 + 9000), 0)
        node.add(_msg("gone", T0 + 9000), 1)
    for node in pair:
        node.reschedule("x", T0 + 20_000, 2)
    _commit(a, [b], T0 + 100)  # publishes the first move of x
    assert a.store.scan_undo(10) == []
    for node in pair:
        node.reschedule("x", T0 + 30_000, 3)  # not committed
        node.reschedule("gone", T0 + 40_000, 4)  # not committed, then cancelled
        node.ledger.apply_decoded([(Op.CANCEL, "gone", 0, None)], {0: 6}, [(0, 5)])
    assert a.slots() == {"x": T0 + 30_000}
    a.replica.follow()
    assert a.slots() == b.slots() == {"x": T0 + 20_000}
    assert a.stored()["x"][1] == b.stored()["x"][1]
    gone = a.store.get_index(["gone"])[0]
    assert keys.is_cancelled(gone)


def test_a_published_move_with_a_later_one_in_flight_is_where_the_undo_returns(
    pair: tuple[Node, Node],
) -> None:
    """The journal follows the commits: the cut covers the first reschedule, not the second,
    so the entry moves to the first's slot and a fencing puts the message back there."""
    a, b = pair
    for node in pair:
        node.add(_msg("x", T0 + 9000), 0)
        node.reschedule("x", T0 + 20_000, 1)
    a.frontier.advance(T0 + 100)
    seek, covered = a.frontier.cut()
    moves = a.ledger.moves(covered)
    for node in pair:
        node.reschedule("x", T0 + 30_000, 2)  # after the cut: in flight
    states = [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()]
    b.replica.apply_cut(seek, states, covered)
    a.replica.apply_cut(seek, [], covered)
    a.ledger.forget_moves(moves)
    ((_id, slot, _value),) = a.store.scan_undo(10)
    assert slot == T0 + 20_000
    a.replica.follow()
    assert a.slots() == b.slots() == {"x": T0 + 20_000}
    assert a.stored()["x"][1] == b.stored()["x"][1]


def test_a_crash_between_the_commit_and_the_journal_is_repaired_by_the_progress_read_again(
    tmp_path: Path,
) -> None:
    """The journal's entry outlives a commit that carried the move (the process died between
    Kafka's commit and ``forget_moves``): the restarted replica undoes the move, and the
    committed state, read again from the progress topic's start, moves it back."""
    leading = ReplicaPlacement()
    leading.leading = True
    a = Node(tmp_path / "a", leading)
    a.add(_msg("x", T0 + 9000), 0)
    a.reschedule("x", T0 + 60_000, 1)
    a.frontier.advance(T0 + 100)
    seek, covered = a.frontier.cut()
    moves = a.ledger.moves(covered)
    states = [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()]
    a.store.close()  # committed in Kafka; the journal still holds the entry
    restarted = Node(tmp_path / "a", ReplicaPlacement())
    try:
        restarted.replica.follow()
        assert restarted.slots() == {"x": T0 + 9000}
        restarted.replica.apply_cut(seek, states, covered)  # the follower reads it again
        assert restarted.slots() == {"x": T0 + 60_000}
    finally:
        restarted.store.close()


def test_a_batch_whose_write_failed_and_is_read_again_journals_its_move(
    pair: tuple[Node, Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest reads a batch again when its write failed (a full disk): the move must not be
    known before the write, or the retry finds it and journals nothing."""
    a, b = pair
    for node in pair:
        node.add(_msg("x", T0 + 9000), 0)
    real_write = a.store.write
    failures = [OSError("no space left on device")]

    def failing_once(batch: object) -> None:
        if failures:
            raise failures.pop()
        real_write(batch)  # type: ignore[arg-type]

    monkeypatch.setattr(a.store, "write", failing_once)
    with pytest.raises(OSError):
        a.reschedule("x", T0 + 60_000, 1)
    assert a.ledger.moves() == {}
    a.reschedule("x", T0 + 60_000, 1)  # read again
    b.reschedule("x", T0 + 60_000, 1)
    assert a.slots() == {"x": T0 + 60_000}
    a.replica.follow()  # fenced before a commit carried it
    assert a.slots() == b.slots() == {"x": T0 + 9000}


def test_a_repeats_last_occurrence_moved_and_delivered_in_one_commit_counts_as_delivered(
    pair: tuple[Node, Node],
) -> None:
    """The master moves a repeat's last occurrence earlier and delivers it in the same
    transaction: the progress carries the move, then the repeat's end (a tombstone) under the
    same key. A follower that took only the last state of the id kept the occurrence at its
    first slot, ahead of the seek: a successor delivered it again."""
    a, b = pair
    repeat = Repeat(RepeatKind.FIXED, 10_000, 2)
    for node in pair:
        node.add(_msg("r", T0 + 1000, repeat), 0)
    # The first occurrence delivered: the second's state (due T0 + 11 s), applied by both.
    a.frontier.advance(T0 + 2000)
    seek, covered = a.frontier.cut()
    second = _msg("r", T0 + 1000, repeat)
    second.occurrence = 2
    for node in pair:
        node.replica.apply_cut(seek, [RepeatState("r", second, T0 + 11_000)], covered)
    for node in pair:
        node.reschedule("r", T0 + 5000, 1)  # occurrence 2 now due at T0 + 5 s
    assert b.slots() == {"r": T0 + 11_000}
    a.frontier.advance(T0 + 6000)  # the transaction that delivers it
    seek, covered = a.frontier.cut()
    moves = a.ledger.moves(covered)
    records: list[Cut | RepeatState] = [
        RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()
    ]
    records += [RepeatState("r", None, 0), Cut(1, seek, covered, "a", T0)]
    follower = Follower(b.replica.apply_cut, lambda: b.replica.inner_offsets([0]))
    follower.take(records)
    assert follower.apply_covered() == 1
    assert _pending(b) == {}
    assert b.slots() == {"r": T0 + 5000}


def test_a_reschedule_to_sooner_holds_the_frontier_below_its_new_slot_while_written(
    alone: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the cluster check (issue 59's acceptance run, 2 of 13,127 reschedules lost):
    a batch reserved only the old slot of a message it rescheduled, so while its write was in
    flight the frontier could pass the new, sooner slot; the deliverer's scan missed the
    message, its commit passed it, and nobody delivered it. Mutant caught: the old reservation.
    """
    alone.ledger.apply([_msg("x", T0 + 10_000)])
    alone.frontier.advance(T0)
    during: list[int] = []
    real_write = alone.store.write

    def write_while_the_deliverer_advances(batch: object) -> None:
        during.append(alone.frontier.advance(T0 + 5000))  # the transaction loop, meanwhile
        real_write(batch)  # type: ignore[arg-type]

    monkeypatch.setattr(alone.store, "write", write_while_the_deliverer_advances)
    alone.ledger.apply([RescheduleRequest("x", T0 + 100)])
    assert alone.slots() == {"x": T0 + 100}
    assert during == [T0 + 99], "the frontier passed the new slot before it was written"

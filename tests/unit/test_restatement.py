"""Restatements keep a compacted inner topic true (``schedule/restatement.py``).

A node alone applies a random history of adds, re-sent adds, cancels (before and after their
add, too late), reschedules and deliveries; the restatements it decides are appended to the
log some records later, as its producer would, and read back by it like any record. Then the
log is compacted as Kafka's cleaner does (each id's last record, in log order) and applied to
an empty store, which finishes as a node alone's rebuild does (``runtime/rebuild.py``: the last
cut applied, what it does not cover moved past it). Both stores must hold the same: every id
pending at the same slot with the same message, delivered, cancelled at the same time, or
unknown.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chronos import wire
from chronos.clock import FakeClock
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.published import Published
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import (
    CancelRequest,
    DelayMessage,
    Expiry,
    InnerRequest,
    Refresh,
    RescheduleRequest,
)
from chronos.node.delete import DeleteWorker
from chronos.node.expiry import ExpiryWriter
from chronos.node.restater import Restater
from chronos.runtime.rebuild import AloneRebuild
from chronos.schedule import restatement
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import ALONE, Ledger
from chronos.schedule.progress_record import Cut, RepeatState
from chronos.schedule.restatement import Restatement
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
IDS = ("a", "b", "c")
RETENTION = DeleteSettings(tombstone_retention_s=3600, retention_s=1)


def _restater(
    store: RocksStore, ledger: Ledger, publisher: StubPublisher, clock: FakeClock
) -> Restater:
    """A restater to the topic ``inner``, tombstones kept an hour (``RETENTION``'s)."""
    return Restater(
        store=store,
        ledger=ledger,
        publisher=publisher,
        inner_topic="inner",
        clock=clock,
        tombstone_retention_ms=3_600_000,
    )


#: One step of a history: ("add", id, due offset from now, payload), ("cancel", id),
#: ("reschedule", id, due offset), ("deliver", ms the clock moves first).
_add = st.tuples(
    st.just("add"), st.sampled_from(IDS), st.integers(-300, 900), st.sampled_from(["x", "y", None])
)
_cancel = st.tuples(st.just("cancel"), st.sampled_from(IDS))
_reschedule = st.tuples(st.just("reschedule"), st.sampled_from(IDS), st.integers(-300, 900))
_deliver = st.tuples(st.just("deliver"), st.integers(0, 600))
#: A delete pass after the clock moved: delivered ids past retention, cancels past theirs.
_purge = st.tuples(st.just("purge"), st.sampled_from([0, 2_000, 3_700_000]))
_step = st.one_of(_add, _add, _cancel, _reschedule, _deliver, _purge)


@dataclass
class Leader:
    """A node alone with restatements on, its restater, and the log it reads."""

    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    clock: FakeClock
    restater: Restater
    publisher: StubPublisher
    deleter: DeleteWorker
    log: list[InnerRequest] = field(default_factory=list)
    #: Records of the publisher already queued for the log.
    seen: int = 0
    #: Ids a cancel came too late for.
    too_late: set[str] = field(default_factory=set)
    #: Restatements produced and not in the log yet, each with the records still to come first.
    queued: list[tuple[int, InnerRequest]] = field(default_factory=list)
    cut: Cut | None = None
    #: The moves published with the cuts, by id (a compacted progress topic keeps the last).
    moves: dict[str, RepeatState] = field(default_factory=dict)

    def append(self, request: InnerRequest) -> None:
        """A record lands in the log; the leader reads it at once."""
        offset = len(self.log)
        self.log.append(request)
        outcome = self.ledger.apply([request], {0: offset + 1}, origins=[(0, offset)])
        if outcome.cancel_too_late:
            self.too_late.add(request.id)

    def send(self) -> None:
        """The restater looks at the outbox; what it (and the delete worker's expiry writer)
        produced lands 1-3 records later."""
        self.restater.send_due()
        for record in self.publisher.published[self.seen :]:
            assert record.partition == 0, "restated to the partition its id came from"
            wait = 1 + len(self.log) % 3
            self.queued.append((wait, wire.decode(record.value, record.headers)))
        self.seen = len(self.publisher.published)

    def produce_due(self, drain: bool = False) -> None:
        """Append the restatements whose turn came (all, when draining: and what those cause,
        until the outbox is empty)."""
        for _ in range(1000):
            self.send()
            if not self.queued:
                return
            ready = [r for wait, r in self.queued if wait <= 0 or drain]
            self.queued = [(wait - 1, r) for wait, r in self.queued if wait > 0 and not drain]
            for request in ready:
                self.append(request)
            if not drain:
                return
        raise AssertionError(f"restatements never settle: {self.queued}")

    def purge(self, ms: int) -> None:
        """The clock moves, everything due is delivered, and the delete worker runs."""
        self.clock.advance(ms)
        self.deliver()
        self.deleter.run_once()

    def deliver(self) -> None:
        """The push worker delivered everything up to now, and the cut was published with
        the reschedules' moves (as ``node/cut_publisher.py`` publishes them)."""
        frontier = self.frontier.advance(self.clock.now_ms())
        self.ledger.commit_progress(frontier, [])
        seek, offsets = self.frontier.cut()
        self.cut = Cut(1, seek, offsets, "alone", self.clock.now_ms())
        moves = self.ledger.moves()
        for message_id, move in moves.items():
            self.moves[message_id] = RepeatState(message_id, move.message, move.slot_ms)
        self.ledger.forget_moves(moves)


def _tombstone(request: InnerRequest) -> bool:
    """Whether the record's value is null on the wire: the cleaner removes it too, once
    ``delete.retention.ms`` passed."""
    if isinstance(request, CancelRequest):
        return request.cancelled_ms == 0
    return isinstance(request, Expiry | RescheduleRequest) or (
        isinstance(request, DelayMessage) and request.value is None
    )


def _compacted(log: list[InnerRequest]) -> list[tuple[int, InnerRequest]]:
    """What Kafka's cleaner leaves long after: each id's last record, at its offset, unless
    it is a tombstone."""
    last = {request.id: offset for offset, request in enumerate(log)}
    return [
        (offset, log[offset]) for offset in sorted(last.values()) if not _tombstone(log[offset])
    ]


def _state(store: RocksStore, seek: int, message_id: str) -> tuple[object, ...]:
    entry = keys.read_index(store.get_index([message_id])[0])
    if entry is None:
        return ("unknown",)
    if isinstance(entry, keys.Cancelled):
        return ("cancelled", entry.at_ms)
    key, slot = entry.key, entry.slot_ms
    if slot <= seek:
        return ("delivered",)
    stored = store.get_messages([key])[0]
    assert stored is not None
    message = codec.decode(stored)
    return ("pending", slot, message.value, message.due_ms)


def _placed_late_across_the_window(store: RocksStore, seek: int, message_id: str) -> bool:
    """The leader placed the id's add after its due time (late), and the retention cutoff
    falls between the two: a store restored from its record holds it at its due time (as
    any follower does) and forgot it a little earlier. Both agree it was delivered."""
    key = keys.pending_key(store.get_index([message_id])[0])
    if key is None:
        return False
    stored = store.get_messages([key])[0]
    assert stored is not None
    cutoff = seek - int(RETENTION.retention_s * 1000)
    return codec.first_due_of(stored) <= cutoff < keys.slot_of(key)


def _restore(path: Path, clock: FakeClock, leader: Leader, compact: bool = True) -> RocksStore:
    log, cut = leader.log, leader.cut
    store = RocksStore(path, StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, clock, RETENTION, placement, restates=True)
    replica_store = ReplicaStore(store, frontier, ledger, placement)
    replica_store.follow()
    records = _compacted(log) if compact else list(enumerate(log))
    size = 1 + len(log) % 4  # batches of 1-4 records, as ingest reads them
    for start in range(0, len(records), size):
        chunk = records[start : start + size]
        ledger.apply(
            [request for _, request in chunk],
            {0: chunk[-1][0] + 1},
            origins=[(0, offset) for offset, _ in chunk],
        )
    published = Published(cut, dict(leader.moves))
    AloneRebuild(published, store, replica_store, placement, [0], compacted=True).finish()
    DeleteWorker(ledger, RETENTION).run_once()  # forgets what is past retention, as the leader
    return store


# 150 examples, each with stores of its own: a safety net against a hang, not a bound on speed
# (it ran past the default 180 s on a machine loaded by stress-ng and two suites at once).
@pytest.mark.timeout(900)
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=1, max_size=25))
# An id forgotten and sent again before its expiry tombstone lands: the tombstone would remove
# the new add (restated); the same with a cancel after the tombstone of a delivered id.
@example(steps=[("add", "a", 0, "x"), ("purge", 2_000), ("add", "a", 0, "y")])
@example(steps=[("add", "a", 0, "x"), ("purge", 2_000), ("cancel", "a")])
# Found by random runs: a refresh of a message stored and moved in the same batch; a late add
# at the retention edge; a re-sent id behind a too-late cancel.
@example(steps=[("add", "a", 0, None), ("reschedule", "a", 0), ("reschedule", "a", 2)])
@example(steps=[("deliver", 0), ("add", "a", -224, "x"), ("deliver", 173), ("deliver", 600)])
@example(
    steps=[
        ("add", "a", 0, "x"),
        ("deliver", 0),
        *[("add", "a", 0, "x")] * 2,
        ("cancel", "a"),
        ("add", "a", 0, "x"),
        *[("cancel", "a")] * 3,
        *[("add", "a", 0, "x")] * 3,
        ("cancel", "a"),
        ("purge", 2_000),
        ("add", "a", 2, "x"),
    ]
)
def test_a_store_restored_from_the_compacted_log_holds_what_the_node_held(
    tmp_path_factory: object, steps: list[tuple[object, ...]]
) -> None:
    """Delete passes forget delivered ids and expired cancels, and their expiry tombstones
    land in the log too (the cleaner then removes the id).

    Mutants caught (each seen failing): no restatement of a re-sent add (the re-sent
    payload or due time wins after compaction), of an add after its cancel (delivered after
    a restore), of a reschedule (the message vanishes with its payload), of a too-late cancel
    (a delivered message reported cancelled), of a restatement read back after a change; a
    restated cancel carrying the time it was restated instead of the first one; entries not
    cleared when read back (the outbox never empties)."""
    base = Path(str(tmp_path_factory.mktemp("restate")))  # type: ignore[attr-defined]
    clock = FakeClock(T0)
    store = RocksStore(base / "leader", StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    ledger = Ledger(store, frontier, clock, RETENTION, ALONE, restates=True)
    publisher = StubPublisher(auto=True)
    restater = _restater(store, ledger, publisher, clock)
    unpaced = threading.Event()
    unpaced.set()  # the test's clock is fake: the pacing never waits
    expiries = ExpiryWriter(
        publisher=publisher,
        inner_topic="inner",
        partition=lambda _: 0,
        delivering=lambda: True,
        rate=10**9,
        metrics=CountingMetrics(),
        stopping=unpaced,
    )
    deleter = DeleteWorker(ledger, RETENTION, expiries)
    leader = Leader(store, frontier, ledger, clock, restater, publisher, deleter)
    opened = [store]
    try:
        for step in steps:
            kind = step[0]
            if kind == "add":
                _, message_id, offset, payload = step
                due = clock.now_ms() + int(str(offset))
                value = None if payload is None else str(payload).encode()
                leader.append(DelayMessage(str(message_id), "t", None, value, [], due))
            elif kind == "cancel":
                leader.append(CancelRequest(str(step[1])))
            elif kind == "reschedule":
                leader.append(RescheduleRequest(str(step[1]), clock.now_ms() + int(str(step[2]))))
            elif kind == "purge":
                leader.purge(int(str(step[1])))
            else:
                clock.advance(int(str(step[1])))
                leader.deliver()
            clock.advance(1)
            leader.produce_due()
        leader.produce_due(drain=True)
        # A restatement read back after its id was forgotten brings it back as delivered long
        # ago; the next delete pass forgets it again (and writes its tombstone again).
        leader.purge(0)
        leader.produce_due(drain=True)
        assert not leader.queued and store.scan_outbox(10) == [], "every entry read back"
        leader.deliver()  # the last cut covers every record
        restored = _restore(base / "restored", clock, leader)
        opened.append(restored)
        # The cleaner may not have run at all: a restore of the whole log holds the same.
        uncompacted = _restore(base / "whole", clock, leader, compact=False)
        opened.append(uncompacted)
        seek = leader.ledger.seek_ms
        kept = {request.id for _, request in _compacted(leader.log)}
        for message_id in IDS:
            if _placed_late_across_the_window(store, seek, message_id):
                continue
            held, got = _state(store, seek, message_id), _state(restored, seek, message_id)
            assert got == held, (message_id, held, got, steps)
            whole = _state(uncompacted, seek, message_id)
            if whole != held and whole[0] == "cancelled" and message_id in leader.too_late:
                # Known limit: a cancel that came too late, read before the cleaner removed
                # it, by a store that cannot know the message was delivered (its seek is not
                # set yet: ``Ledger._cancel``) leaves the id cancelled instead of delivered
                # or forgotten, and a re-sent add of it is ignored until that tombstone
                # expires. The cleaner removes such a cancel within max.compaction.lag.ms
                # (its restatement follows it at once): only a restore that reads it before
                # then is affected. The compacted restore above holds the same as the node.
                continue
            assert whole == held, ("uncompacted", message_id, held, whole, repr(steps))
            if held == ("unknown",):
                assert message_id not in kept, ("a forgotten id's records are tombstoned", steps)
    finally:
        for each in opened:
            each.close()


def test_records_that_state_themselves_note_nothing_and_a_re_sent_add_is_noted(
    tmp_path: Path,
) -> None:
    """First adds with a payload: no entry (the common path costs no record). A client's
    cancel (a null value: a tombstone the cleaner removes) and an add with a null payload
    are noted; so is a re-sent add, on the node that delivers and on a follower alike (the
    follower may deliver next), only with ``restates`` on, in the partition it came from.
    Mutants caught: noting every add; a follower noting nothing; noting with restates off."""
    clock = FakeClock(T0)
    store = RocksStore(tmp_path / "a", StoreSettings(wal_sync_interval_ms=60_000))
    ledger = Ledger(store, Frontier(0), clock, RETENTION, ALONE, restates=True)
    first = DelayMessage("a", "t", None, b"x", [], T0 + 500)
    own = ledger.apply([first, DelayMessage("b", "t", None, b"y", [], T0 + 9)], {0: 2})
    assert own.restated == 0 and store.scan_outbox(10) == []
    gone = ledger.apply(
        [CancelRequest("b"), CancelRequest("never"), DelayMessage("n", "t", None, None, [], T0)],
        {0: 5},
        origins=[(0, 2), (0, 3), (0, 4)],
    )
    assert gone.restated == 3
    noted = [keys.split_outbox_key(key) for key in store.scan_outbox(10)]
    assert noted == [(0, 2, "b"), (0, 3, "never"), (0, 4, "n")]
    for key in store.scan_outbox(10):
        ledger.drop_restatement(key)
    again = DelayMessage("a", "t", None, b"other", [], T0 + 7)
    assert ledger.apply([again], {3: 8}, origins=[(3, 7)]).restated == 1
    assert store.scan_outbox(10) == [keys.outbox_key(3, 7, "a")]
    assert restatement.pending(store) == [
        (keys.outbox_key(3, 7, "a"), Restatement("a", 3, T0 + 500, codec.encode(first)))
    ]

    follower_store = RocksStore(tmp_path / "b", StoreSettings(wal_sync_interval_ms=60_000))
    follower = Ledger(
        follower_store, Frontier(0), clock, RETENTION, ReplicaPlacement(), restates=True
    )
    follower.apply([first], {0: 1}, origins=[(0, 0)])
    assert follower.apply([first], {0: 2}, origins=[(0, 1)]).restated == 1
    unset_store = RocksStore(tmp_path / "c", StoreSettings(wal_sync_interval_ms=60_000))
    unset = Ledger(unset_store, Frontier(0), clock, RETENTION)
    unset.apply([first], {0: 1})
    assert unset.apply([first], {0: 2}).restated == 0 and unset_store.scan_outbox(10) == []
    for each in (store, follower_store, unset_store):
        each.close()


def test_the_restater_sends_each_entry_once_retries_a_failure_and_drops_what_is_gone(
    tmp_path: Path,
) -> None:
    """Mutants caught: an entry sent again at every look (a record a look, 5 a second); a
    failed send never retried; an entry of an id the store dropped, or of a cancel about to
    expire (read back later, it would cancel a new add of the id), sent anyway."""
    clock = FakeClock(T0)
    store = RocksStore(tmp_path / "a", StoreSettings(wal_sync_interval_ms=60_000))
    ledger = Ledger(store, Frontier(0), clock, RETENTION, ALONE, restates=True)
    message = DelayMessage("a", "t", None, b"x", [], T0 + 500)
    ledger.apply([message, message], {1: 2}, origins=[(1, 0), (1, 1)])
    publisher = StubPublisher()  # answered when told
    restater = _restater(store, ledger, publisher, clock)
    assert restater.send_due() == 1 and restater.send_due() == 0
    (record,) = publisher.published
    assert (record.topic, record.partition) == ("inner", 1)
    assert wire.decode(record.value, record.headers) == Refresh(message, T0 + 500)
    publisher.answer(record, KafkaError(KafkaError._MSG_TIMED_OUT))
    assert restater.send_due() == 1, "a failed send goes out again"
    # Read back: the ledger clears the entry; nothing more to send.
    ledger.apply([Refresh(message, T0 + 500)], {1: 3}, origins=[(1, 2)])
    assert store.scan_outbox(10) == [] and restater.send_due() == 0

    ledger.apply([CancelRequest("c"), CancelRequest("c")], {1: 5}, origins=[(1, 3), (1, 4)])
    clock.advance(3_600_000 - 60_000)  # the tombstone expires within the margin
    assert store.scan_outbox(10) != [] and restater.send_due() == 0
    assert store.scan_outbox(10) == [], "dropped, not sent"
    store.close()


def test_a_move_is_restated_only_once_a_progress_record_carries_it(tmp_path: Path) -> None:
    """Issue 59: what a leader holds of a message it moved without a commit is its decision
    alone; restated (a refresh every replica reads back), it would become everyone's even if
    the leader is fenced and the move undone. Mutant caught: the restater not waiting."""
    clock = FakeClock(T0)
    store = RocksStore(tmp_path / "a", StoreSettings(wal_sync_interval_ms=60_000))
    ledger = Ledger(store, Frontier(0), clock, RETENTION, ALONE, restates=True)
    message = DelayMessage("a", "t", None, b"x", [], T0 + 500)
    ledger.apply([message], {1: 1}, origins=[(1, 0)])
    ledger.apply([RescheduleRequest("a", T0 + 9000)], {1: 2}, origins=[(1, 1)])
    publisher = StubPublisher()
    restater = _restater(store, ledger, publisher, clock)
    assert store.scan_outbox(10) != [] and restater.send_due() == 0
    ledger.forget_moves(ledger.moves())  # the progress record that carries the move
    assert restater.send_due() == 1
    (record,) = publisher.published
    restated = wire.decode(record.value, record.headers)
    assert isinstance(restated, Refresh) and restated.slot_ms == T0 + 9000
    store.close()

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

from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chronos import wire
from chronos.clock import FakeClock
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.kafka.publishers.stub import StubPublisher
from chronos.model import CancelRequest, DelayMessage, InnerRequest, Refresh, RescheduleRequest
from chronos.node.restater import Restater
from chronos.runtime.rebuild import AloneRebuild, Published
from chronos.schedule import restatement
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import ALONE, Ledger
from chronos.schedule.progress_record import Cut
from chronos.schedule.restatement import Restatement
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
IDS = ("a", "b", "c")
RETENTION = DeleteSettings(tombstone_retention_s=3600)

#: One step of a history: ("add", id, due offset from now, payload), ("cancel", id),
#: ("reschedule", id, due offset), ("deliver", ms the clock moves first).
_add = st.tuples(
    st.just("add"), st.sampled_from(IDS), st.integers(-300, 900), st.sampled_from("xy")
)
_cancel = st.tuples(st.just("cancel"), st.sampled_from(IDS))
_reschedule = st.tuples(st.just("reschedule"), st.sampled_from(IDS), st.integers(-300, 900))
_deliver = st.tuples(st.just("deliver"), st.integers(0, 600))
_step = st.one_of(_add, _add, _cancel, _reschedule, _deliver)


@dataclass
class Leader:
    """A node alone with restatements on, its restater, and the log it reads."""

    store: RocksStore
    frontier: Frontier
    ledger: Ledger
    clock: FakeClock
    restater: Restater
    publisher: StubPublisher
    log: list[InnerRequest] = field(default_factory=list)
    #: Restatements produced and not in the log yet, each with the records still to come first.
    queued: list[tuple[int, InnerRequest]] = field(default_factory=list)
    cut: Cut | None = None

    def append(self, request: InnerRequest) -> None:
        """A record lands in the log; the leader reads it at once."""
        offset = len(self.log)
        self.log.append(request)
        self.ledger.apply([request], {0: offset + 1}, origins=[(0, offset)])

    def send(self) -> None:
        """The restater looks at the outbox; what it produces lands 1-3 records later."""
        before = len(self.publisher.published)
        self.restater.send_due()
        for record in self.publisher.published[before:]:
            assert record.partition == 0, "restated to the partition its id came from"
            wait = 1 + len(self.log) % 3
            self.queued.append((wait, wire.decode(record.value, record.headers)))

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

    def deliver(self) -> None:
        """The push worker delivered everything up to now, and the cut was published."""
        frontier = self.frontier.advance(self.clock.now_ms())
        self.ledger.commit_progress(frontier, [])
        seek, offsets = self.frontier.cut()
        self.cut = Cut(1, seek, offsets, "alone", self.clock.now_ms())


def _restated_cancel(request: InnerRequest) -> bool:
    return isinstance(request, CancelRequest) and request.cancelled_ms != 0


def _compacted(log: list[InnerRequest]) -> list[tuple[int, InnerRequest]]:
    """What Kafka's cleaner leaves: each id's last record, at its offset."""
    last = {request.id: offset for offset, request in enumerate(log)}
    return [(offset, log[offset]) for offset in sorted(last.values())]


def _state(store: RocksStore, seek: int, message_id: str) -> tuple[object, ...]:
    index = store.get_index([message_id])[0]
    if index is None:
        return ("unknown",)
    if index[:1] == keys.INDEX_CANCELLED:
        return ("cancelled", keys.split_cancelled(index)[0])
    key = index[1:]
    slot = keys.slot_of(key)
    if slot <= seek:
        return ("delivered",)
    stored = store.get_messages([key])[0]
    assert stored is not None
    message = codec.decode(stored)
    return ("pending", slot, message.value, message.due_ms)


def _restore(path: Path, clock: FakeClock, log: list[InnerRequest], cut: Cut | None) -> RocksStore:
    store = RocksStore(path, StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, clock, RETENTION, placement)
    replica_store = ReplicaStore(store, frontier, ledger, placement)
    replica_store.follow()
    for offset, request in _compacted(log):
        ledger.apply([request], {0: offset + 1}, origins=[(0, offset)])
    AloneRebuild(Published(cut, {}), store, replica_store, placement, [0]).finish()
    return store


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=1, max_size=25))
def test_a_store_restored_from_the_compacted_log_holds_what_the_node_held(
    tmp_path_factory: object, steps: list[tuple[object, ...]]
) -> None:
    """Mutants caught (each seen failing): no restatement of a re-sent add (the re-sent
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
    restater = Restater(store, ledger, publisher, "inner", clock, 3_600_000)
    leader = Leader(store, frontier, ledger, clock, restater, publisher)
    for step in steps:
        kind = step[0]
        if kind == "add":
            _, message_id, offset, payload = step
            due = clock.now_ms() + int(str(offset))
            leader.append(DelayMessage(str(message_id), "t", None, str(payload).encode(), [], due))
        elif kind == "cancel":
            leader.append(CancelRequest(str(step[1])))
        elif kind == "reschedule":
            leader.append(RescheduleRequest(str(step[1]), clock.now_ms() + int(str(step[2]))))
        else:
            clock.advance(int(str(step[1])))
            leader.deliver()
        clock.advance(1)
        leader.produce_due()
    leader.produce_due(drain=True)
    assert not leader.queued and store.scan_outbox(10) == [], "every entry read back"
    leader.deliver()  # the last cut covers every record
    restored = _restore(base / "restored", clock, leader.log, leader.cut)
    seek = leader.ledger.seek_ms
    last = {request.id: request for request in leader.log}
    for message_id in IDS:
        held, got = _state(store, seek, message_id), _state(restored, seek, message_id)
        if held[0] == got[0] == "cancelled" and not _restated_cancel(last[message_id]):
            # A client's cancel carries no time: a restore starts its tombstone's lifetime.
            continue
        assert got == held, (message_id, leader.log)
    store.close()
    restored.close()


def test_records_that_state_themselves_note_nothing_and_a_re_sent_add_is_noted(
    tmp_path: Path,
) -> None:
    """First adds, cancels of pending or unknown ids: no entry (the common path costs no
    record). A re-sent add is noted on the node that delivers and on a follower alike (the
    follower may deliver next), only with ``restates`` on, in the partition it came from.
    Mutants caught: noting every add; a follower noting nothing; noting with restates off."""
    clock = FakeClock(T0)
    store = RocksStore(tmp_path / "a", StoreSettings(wal_sync_interval_ms=60_000))
    ledger = Ledger(store, Frontier(0), clock, RETENTION, ALONE, restates=True)
    first = DelayMessage("a", "t", None, b"x", [], T0 + 500)
    own = ledger.apply([first, DelayMessage("b", "t", None, b"y", [], T0 + 9)], {0: 2})
    gone = ledger.apply([CancelRequest("b"), CancelRequest("never")], {0: 4})
    assert own.restated == gone.restated == 0 and store.scan_outbox(10) == []
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
    restater = Restater(store, ledger, publisher, "inner", clock, 3_600_000)
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

"""Progress records round-trip, and a follower applies them only once ingest covers them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from chronos.errors import DecodeError
from chronos.group.follower import Follower, read_to_end
from chronos.model import DelayMessage
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.progress_record import (
    Cut,
    RepeatState,
    decode,
    decode_node_cut,
    encode_cut,
    encode_node_cut,
    encode_repeat,
    node_cut_partition,
)

T0 = 1_700_000_000_000


def test_a_cut_round_trips() -> None:
    cut = Cut(term=3, seek_ms=T0, offsets={0: 10, 3: 7}, node="a", committed_at_ms=T0 + 5)
    assert decode(*encode_cut(cut)) == cut
    planned = Cut(3, T0, {0: 10}, "a", T0 + 5, paced={"t": T0 + 900.5}, ahead_ms=T0 + 10_000)
    assert decode(*encode_cut(planned)) == planned


def test_a_repeat_state_round_trips_and_finishes_as_a_tombstone() -> None:
    repeat = Repeat(RepeatKind.FIXED, interval_ms=1000, times=3)
    message = DelayMessage("r", "orders", None, b"v", [("h", b"1")], T0, repeat, occurrence=2)
    state = RepeatState("r", message, T0 + 1001)
    assert decode(*encode_repeat(state)) == state
    key, value = encode_repeat(RepeatState("r", None, 0))
    assert value is None
    assert decode(key, value) == RepeatState("r", None, 0)


@pytest.mark.parametrize(
    ("key", "value"),
    [(b"cut", b"{"), (b"cut", b'{"v": 9}'), (b"other", b"x"), (b"repeat:r", b"\x00")],
)
def test_foreign_progress_records_are_refused(key: bytes, value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(key, value)


@dataclass
class FakeLedger:
    applied: list[tuple[int, list[RepeatState], dict[int, int]]] = field(default_factory=list)

    def apply_cut(
        self, seek_ms: int, states: Sequence[RepeatState], covered: Mapping[int, int]
    ) -> None:
        self.applied.append((seek_ms, list(states), dict(covered)))


def test_a_cut_waits_until_ingest_stored_everything_below_it() -> None:
    ledger = FakeLedger()
    ingested = {0: 5, 1: 0}
    follower = Follower(ledger.apply_cut, lambda: dict(ingested))
    state = RepeatState("r", None, 0)
    follower.take(
        [
            state,
            Cut(1, T0, {0: 5}, "a", T0),
            Cut(1, T0 + 10, {0: 6, 1: 2}, "a", T0),
        ]
    )
    assert follower.apply_covered() == 1
    assert ledger.applied == [(T0, [state], {0: 5})]
    assert follower.apply_covered() == 0  # partition 1 not ingested far enough
    ingested.update({0: 6, 1: 2})
    assert follower.apply_covered() == 1
    assert ledger.applied[-1] == (T0 + 10, [], {0: 6, 1: 2})
    assert follower.applied is not None and follower.applied.seek_ms == T0 + 10


@dataclass
class _OpenTransactionLog:
    """A progress topic whose high watermark lies past the last stable offset: a master's
    delivery transaction is open, as it is most of the time under load."""

    records: list[Cut | RepeatState]
    end_reached: int = -1
    position: int = -1

    def read(self, timeout_s: float) -> list[Cut | RepeatState]:
        out, self.records = self.records, []
        self.position += len(out) + (1 if out else 0)  # offsets 0-2 read: position 3
        return out

    def skip_to(self, offset: int) -> None:
        self.position = max(self.position, offset)

    def end_offset(self, timeout_s: float, topic: str | None = None, partition: int = 0) -> int:
        return 3  # an open transaction's record lies past the stable offset

    def close(self) -> None:
        pass


def test_reading_to_the_end_stops_at_the_stable_offset_not_the_high_watermark() -> None:
    """Mutant caught: waiting for the high watermark, which an open transaction holds ahead of
    what a read_committed reader can reach (nodes failed to start for 30 s under load)."""
    repeat = RepeatState("r", None, 0)
    log = _OpenTransactionLog([Cut(1, 10, {0: 1}, "a", 5), repeat, Cut(2, 20, {0: 2}, "a", 6)])
    with pytest.raises(TimeoutError):  # librdkafka reports no end at the stable offset
        read_to_end(_OpenTransactionLog(list(log.records)), timeout_s=0.5)
    cut, states = read_to_end(log, timeout_s=60.0, stable_end=3)  # a safety net, not a bound
    assert cut == Cut(2, 20, {0: 2}, "a", 6) and states == {"r": repeat}


def _cluster_cut(term: int, seq: int, seek: int, logged: int | None = None) -> Cut:
    return Cut(term, seek, {0: 0}, "owner", seek, seq=seq, logged=logged)


def test_a_node_log_cut_waits_for_the_own_log_cut_it_names_and_its_states_go_first() -> None:
    """A cluster partition's cuts come from two logs read by one consumer in no set order
    between them (``group/node_log.py``). A node-log cut naming own-log cut 1 waits for it,
    so that the repeat state before it is applied first. Mutant caught: a node-log cut taken
    as it arrives (the state applied after a cut that passed its message)."""
    ledger = FakeLedger()
    follower = Follower(ledger.apply_cut, lambda: {0: 10})
    follower.take([_cluster_cut(1, 0, T0)])
    follower.take_node_cuts([_cluster_cut(1, 2, T0 + 20, logged=1)])
    assert follower.apply_covered() == 1
    assert [seek for seek, _s, _c in ledger.applied] == [T0], "applied before its own-log cut"
    state = RepeatState("r", None, 0)
    follower.take([state, _cluster_cut(1, 1, T0 + 10)])
    follower.apply_covered()
    assert ledger.applied[-1] == (T0 + 20, [state], {0: 0})
    assert follower.applied is not None and follower.applied.seq == 2


def test_a_node_log_cut_older_than_one_taken_is_dropped() -> None:
    """Cuts are cumulative: one read late from the node log, after a later own-log cut of
    its term or a cut of a later term, says nothing more. Mutants caught: an older cut
    applied after a newer one (the seek moving back); a new term's node-log cut applied
    before that term's first own-log cut (a claim's first cut, where the term shows)."""
    ledger = FakeLedger()
    follower = Follower(ledger.apply_cut, lambda: {0: 10})
    follower.take([_cluster_cut(1, 0, T0), _cluster_cut(1, 3, T0 + 30)])
    follower.take_node_cuts([_cluster_cut(1, 2, T0 + 20, logged=0)])
    follower.apply_covered()
    assert [seek for seek, _s, _c in ledger.applied] == [T0 + 30]
    follower.take_node_cuts([_cluster_cut(2, 1, T0 + 50, logged=0)])
    assert follower.apply_covered() == 0, "a new term's cut before that term's first"
    follower.take([_cluster_cut(2, 0, T0 + 40)])
    follower.apply_covered()
    assert [seek for seek, _s, _c in ledger.applied] == [T0 + 30, T0 + 50]


def test_a_node_cut_round_trips_with_its_partition_in_its_key() -> None:
    cut = Cut(3, T0, {4: 9}, "a", T0 + 1, seq=7, logged=5)
    key, value = encode_node_cut(4, cut)
    assert node_cut_partition(key) == 4
    assert decode_node_cut(key, value) == (4, cut)
    assert node_cut_partition(b"cut") is None and node_cut_partition(b"cut:x") is None
    with pytest.raises(DecodeError):
        decode_node_cut(b"repeat:r", value)

"""The claim rule (``group/claims.py``): whichever reader applies it to a partition's progress
log names the same holder, whatever the order claims raced in, and compaction changes none
of it. Kafka's part (fences, open transactions, read-back) is in
``tests/integration/test_claims.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from chronos.errors import DecodeError
from chronos.group.claims import Ownership
from chronos.group.follower import ProgressLog
from chronos.schedule.progress_record import (
    Claim,
    Cut,
    RepeatState,
    decode,
    encode_claim,
    encode_cut,
    encode_repeat,
)

Record = Cut | RepeatState | Claim


def claim(term: int, node: str, after: int, nonce: str = "n") -> Claim:
    return Claim(term=term, node=node, after=after, nonce=nonce)


def cut(term: int, node: str, seek: int = 0, released_to: str | None = None) -> Cut:
    return Cut(term, seek, {0: seek}, node, seek, released_to=released_to)


def owned(records: Sequence[Record]) -> Ownership:
    ownership = Ownership()
    for offset, record in enumerate(records):
        ownership.take(offset, record)
    return ownership


def test_a_claim_round_trips_under_a_key_of_its_own() -> None:
    first = Claim(term=4, node="a", after=17, nonce="x1", fenced=("ns.delivery.c.b",))
    second = Claim(term=4, node="a", after=17, nonce="x2")
    assert decode(*encode_claim(first)) == first
    assert encode_claim(first)[0] != encode_claim(second)[0], "compaction would keep one"
    assert encode_claim(first)[0].startswith(b"claim:4:a:")


@pytest.mark.parametrize("value", [None, b"{", b'{"v": 9}', b'{"v": 1, "term": 1}'])
def test_a_broken_or_tombstoned_claim_is_refused(value: bytes | None) -> None:
    with pytest.raises(DecodeError):
        decode(b"claim:1:a:n", value)


def test_the_first_claim_of_a_term_wins_and_a_later_one_of_the_same_term_loses() -> None:
    """Two watchers read the same log (holder c at term 1, offset 1) and both claim term 2."""
    ownership = owned([claim(1, "c", -1), cut(1, "c", 10), claim(2, "a", 1), claim(2, "b", 1)])
    assert (ownership.node, ownership.term, ownership.claimed) == ("a", 2, True)
    assert ownership.claim_offset == 2
    assert ownership.max_term == 2


def test_a_claim_over_a_term_it_did_not_read_loses() -> None:
    """A slow watcher read holder a at term 1, fenced it; a retook with term 2 first (its own
    partition: no fence); the watcher's claim of term 2 lands after it and loses. A claim of
    term 3 read after both wins."""
    records: list[Record] = [claim(1, "a", -1), cut(1, "a", 5)]
    records += [claim(2, "a", 1), claim(2, "w", 1)]
    ownership = owned(records)
    assert (ownership.node, ownership.term) == ("a", 2)
    records.append(claim(3, "w", 3))
    assert (owned(records).node, owned(records).term) == ("w", 3)


def test_a_cut_the_fenced_holder_completed_after_the_read_does_not_stop_the_claim() -> None:
    """Fencing lets a transaction in PrepareCommit complete: a cut of the old term may lie
    between the claim's ``after`` and the claim. It is of the old term, so the claim wins,
    and the winner starts from it (``ClaimLog.cut_before``)."""
    ownership = owned([claim(1, "c", -1), cut(1, "c", 10), cut(1, "c", 20), claim(2, "a", 1)])
    assert (ownership.node, ownership.term) == ("a", 2)
    assert ownership.cut == cut(1, "c", 20)


def test_whom_a_claimant_fences() -> None:
    """Mutants caught: the shared id left unfenced when the claimant is named as the last
    release's master was (or was handed the partition by it), or when the log is empty."""
    assert Ownership().fences_needed("a") == [""], "an old master's first transaction may be open"
    held = owned([claim(1, "c", -1), cut(1, "c", 10)])
    assert held.fences_needed("a") == ["c"]
    assert held.fences_needed("c") == [], "a retake of its own partition"
    released = owned([claim(1, "c", -1), cut(1, "c", 10, released_to="a")])
    assert released.fences_needed("a") == [], "handed over"
    assert released.fences_needed("b") == ["c"], "handed to another: c may still commit"
    old_shape = owned([cut(7, "c", 10)])
    assert (old_shape.node, old_shape.term, old_shape.claimed) == ("c", 7, False)
    assert old_shape.fences_needed("a") == ["c", ""], "the last release's shared id, and c's"
    assert old_shape.fences_needed("c") == [""], "a name says nothing of the shared producer"
    handed = owned([cut(7, "c", 10, released_to="a")])
    assert handed.fences_needed("a") == ["c", ""]


def test_a_winner_starts_from_the_last_cut_before_its_claim() -> None:
    ownership = owned([claim(1, "c", -1), cut(1, "c", 10), cut(1, "c", 20), claim(2, "a", 2)])
    assert ownership.cut_at_claim == cut(1, "c", 20)
    ownership.take(4, cut(2, "a", 30))
    assert ownership.cut_at_claim == cut(1, "c", 20) and ownership.cut == cut(2, "a", 30)


def test_a_handover_is_undone_by_a_later_claim_of_the_holder() -> None:
    """released_to names who may claim without fencing; once somebody claims, it is void."""
    ownership = owned([claim(1, "c", -1), cut(1, "c", 10, released_to="a"), claim(2, "b", 1)])
    assert (ownership.node, ownership.released_to) == ("b", None)
    assert ownership.fences_needed("a") == ["b"]


def test_a_cut_of_an_older_term_after_a_winning_claim_changes_no_holder() -> None:
    ownership = owned([claim(1, "c", -1), claim(2, "a", 0), cut(1, "c", 30)])
    assert (ownership.node, ownership.term, ownership.claimed) == ("a", 2, True)


def test_a_log_of_the_last_release_then_claims() -> None:
    """Migration: cuts of terms 1-5 of a replica group (no claims), then a claim of term 6."""
    records: list[Record] = [cut(t, f"r{t % 2}", t * 10) for t in range(1, 6)]
    records.append(claim(6, "a", 4))
    ownership = owned(records)
    assert (ownership.node, ownership.term, ownership.claimed) == ("a", 6, True)


def encoded_record(record: Record) -> tuple[bytes, bytes | None]:
    if isinstance(record, Claim):
        return encode_claim(record)
    if isinstance(record, Cut):
        return encode_cut(record)
    return encode_repeat(record)


def compacted(records: Sequence[Record]) -> list[tuple[int, Record]]:
    """What Kafka's cleaner leaves of a log: each key's last record, at its own offset (a
    tombstone removed too)."""
    last: dict[bytes, int] = {}
    encoded = [encoded_record(record) for record in records]
    for offset, (key, _value) in enumerate(encoded):
        last[key] = offset
    return [
        (offset, decode(*encoded[offset]))
        for offset in sorted(last.values())
        if encoded[offset][1] is not None
    ]


def test_compaction_between_claims_names_the_same_holder() -> None:
    """Mutant caught: claims keyed by term alone (``claim:<term>``): the cleaner keeps the
    loser's claim, the last of the key, where the winner's was."""
    records: list[Record] = [claim(1, "a", -1)]
    for seek in range(1, 6):
        records += [cut(1, "a", seek * 10), RepeatState("r", None, 0)]
    records += [claim(2, "b", 10, "x"), claim(2, "c", 10, "y"), cut(2, "b", 70)]
    records += [cut(2, "b", 80), claim(3, "c", 13, "z"), claim(3, "a", 13, "w")]
    full = owned(records)
    after = Ownership()
    for offset, record in compacted(records):
        after.take(offset, record)
    assert (full.node, full.term, full.claim_offset) == ("c", 3, 15)
    assert (after.node, after.term, after.claim_offset) == (full.node, full.term, 15)


@dataclass
class _Message:
    _key: bytes
    _value: bytes | None
    _offset: int

    def error(self) -> None:
        return None

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset


class _Consumer:
    def __init__(self, messages: list[_Message]) -> None:
        self.messages = messages

    def assign(self, partitions: object) -> None:
        pass

    def poll(self, timeout: float = 0) -> _Message | None:
        return self.messages.pop(0) if self.messages else None

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[_Message]:
        out, self.messages = self.messages[:num_messages], self.messages[num_messages:]
        return out


def test_a_follower_reads_cuts_and_repeat_states_and_skips_claims() -> None:
    """A claim changes no store, a losing one included: the follower's reader drops them."""
    records: list[Record] = [claim(1, "a", -1), cut(1, "a", 10), claim(2, "b", 0)]
    records.append(RepeatState("r", None, 0))
    messages = [_Message(*encoded_record(r), offset) for offset, r in enumerate(records)]
    consumer = _Consumer(messages)

    def open_consumer(_group: str, _errors: object, _options: Mapping[str, object]) -> _Consumer:
        return consumer

    reader = ProgressLog("t", "g", open_consumer, errors=None)  # type: ignore[arg-type]
    assert reader.read(0.1) == [cut(1, "a", 10), RepeatState("r", None, 0)]
    assert reader.position == 4


def test_a_winning_claim_starts_from_the_cut_it_carries_and_a_losing_ones_is_ignored() -> None:
    """A cluster node's cuts are mostly in its node log: a claimant reads its holder's there
    after the fence and its claim carries the later cut. A winner that died before writing a
    cut of its own leaves that cut to the next claimant, which the log alone would send back
    to the older cut in it (duplicates). Mutants caught: the carried cut ignored; a losing
    claim's carried cut taken."""
    in_node_log = Cut(1, 50, {0: 50}, "c", 50, seq=7, logged=3)
    carried = Claim(term=2, node="a", after=1, nonce="x", cut=in_node_log)
    assert decode(*encode_claim(carried)) == carried
    ownership = owned([claim(1, "c", -1), cut(1, "c", 10), carried])
    assert ownership.cut_at_claim == in_node_log
    loser = Claim(term=2, node="b", after=1, nonce="y", cut=Cut(1, 90, {0: 90}, "c", 90, seq=9))
    then = owned([claim(1, "c", -1), cut(1, "c", 10), carried, loser, claim(3, "d", 3)])
    assert then.node == "d" and then.cut_at_claim == in_node_log

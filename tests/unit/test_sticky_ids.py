"""``proxy/sticky_ids.py``: the ids a proxy makes up land in one inner partition at a time,
every partition gets its share over time, and hardly a hashed UUID is thrown away."""

from __future__ import annotations

import random
from collections import Counter

from chronos.kafka.partitioner import partition_of
from proxy.sticky_ids import StickyIds


class _Uuids:
    """Seeded random hex ids, counted."""

    def __init__(self, seed: int = 7) -> None:
        self._rng = random.Random(seed)
        self.made = 0

    def __call__(self) -> str:
        self.made += 1
        return f"{self._rng.getrandbits(128):032x}"


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _sticky(partitions: int | None, stick_ms: float = 10.0) -> tuple[StickyIds, _Clock, _Uuids]:
    clock, uuids = _Clock(), _Uuids()
    ids = StickyIds(lambda: partitions, stick_ms, clock, uuids, rng=random.Random(3))
    return ids, clock, uuids


def _partition(message_id: str, partitions: int = 16) -> int:
    return partition_of(message_id.encode(), partitions)


def test_ids_made_within_a_stick_land_in_one_partition_then_another() -> None:
    ids, clock, _ = _sticky(16)
    first = {_partition(ids.new()) for _ in range(50)}
    assert len(first) == 1
    clock.now += 0.011
    second = {_partition(ids.new()) for _ in range(50)}
    assert len(second) == 1
    assert second != first  # the next stick takes the partition with the most ids kept


def test_every_partition_gets_its_share_and_nearly_every_uuid_is_used() -> None:
    ids, clock, uuids = _sticky(16)
    made: list[str] = []
    for _ in range(2_000):  # 2,000 sticks of 10 ids
        made += [ids.new() for _ in range(10)]
        clock.now += 0.010
    assert len(set(made)) == len(made)
    shares = Counter(_partition(m) for m in made)
    assert len(shares) == 16
    assert min(shares.values()) > 0.8 * len(made) / 16
    # Random ids would need 16 UUIDs hashed per id wanted; kept ones make it about one.
    assert uuids.made < 1.1 * len(made)


def test_a_prefix_is_hashed_with_the_id() -> None:
    ids, _, _ = _sticky(16)
    made = [ids.new("acme:") for _ in range(30)]
    assert all(m.startswith("acme:") and len(m) == len("acme:") + 32 for m in made)
    assert len({_partition(m) for m in made}) == 1


def test_plain_random_ids_when_off_or_the_count_is_unknown() -> None:
    for ids, _, uuids in (_sticky(16, stick_ms=0), _sticky(None), _sticky(1)):
        made = [ids.new() for _ in range(64)]
        assert uuids.made == 64  # one UUID each, none hashed and kept
        assert len({_partition(m) for m in made}) > 1


def test_a_new_partition_count_is_followed_and_an_unknown_one_gives_random_ids() -> None:
    counts: list[int | None] = [None]
    uuids = _Uuids()
    ids = StickyIds(lambda: counts[0], 10.0, _Clock(), uuids, rng=random.Random(1))
    ids.new()
    assert uuids.made == 1  # random: nothing known yet
    counts[0] = 4
    assert len({_partition(ids.new(), 4) for _ in range(20)}) == 1
    counts[0] = 32
    assert len({_partition(ids.new(), 32) for _ in range(20)}) == 1

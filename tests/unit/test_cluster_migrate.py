"""A node alone's or group's progress split into a cluster's partitions' shares."""

from __future__ import annotations

from chronos.cluster.migrate import shares
from chronos.group.published import Published
from chronos.kafka.partitioner import partition_of
from chronos.schedule.floor import Floor
from chronos.schedule.progress_record import Cut, RepeatState

T0 = 1_700_000_000_000


def test_each_partition_gets_the_cut_narrowed_to_it_and_its_ids_repeats() -> None:
    """Mutants caught: every partition given the whole offsets map (a partition's replica
    would wait for ingest of partitions it never reads); a repeat's state written to another
    partition than its id's (its next occurrence delivered by a node that does not hold it)."""
    cut = Cut(7, T0, {0: 10, 1: 20, 2: 30}, "old", T0 - 5, Floor({0: 3, 1: 4, 2: 5}, T0 - 99))
    states = {f"r{n}": RepeatState(f"r{n}", None, T0 + n) for n in range(6)}
    out = shares(Published(cut, states), 3, "migrated:node old", T0 + 1)
    for partition, records in out.items():
        *repeats, last = records
        assert last == Cut(
            7,
            T0,
            {partition: (10, 20, 30)[partition]},
            "migrated:node old",
            T0 + 1,
            Floor({partition: (3, 4, 5)[partition]}, T0 - 99),
        )
        assert all(isinstance(r, RepeatState) for r in repeats)
        assert all(
            partition_of(r.message_id.encode(), 3) == partition
            for r in repeats
            if isinstance(r, RepeatState)
        )
    assert sum(len(records) - 1 for records in out.values()) == len(states)


def test_a_source_that_published_no_cut_hands_over_its_repeats_only() -> None:
    states = {"r": RepeatState("r", None, T0)}
    out = shares(Published(None, states), 2, "m", T0)
    assert sorted(len(records) for records in out.values()) == [0, 1]
    assert all(isinstance(r, RepeatState) for records in out.values() for r in records)

"""When a store counts as complete: where its ingest began against the published floor."""

from __future__ import annotations

from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.origin import StoreOrigin


def test_a_store_that_read_every_partition_from_the_start_is_complete_without_a_floor() -> None:
    assert StoreOrigin({0: 0, 1: 0}).complete(None)


def test_a_store_that_began_later_needs_a_floor_at_or_above_where_it_began() -> None:
    origin = StoreOrigin({0: 0, 1: 40})
    assert origin.missing(None) == {1: 40}
    assert origin.missing(Floor({0: 100, 1: 39}, 1)) == {1: 40}
    assert origin.missing(Floor({0: 100}, 1)) == {1: 40}, "no floor of a partition is 0"
    assert origin.complete(Floor({0: 0, 1: 40}, 1))


def test_the_floor_only_moves_to_a_later_pass() -> None:
    floor = RebuildFloor(Floor({0: 5}, 100))
    floor.advance(Floor({0: 3}, 50))
    assert floor.current == Floor({0: 5}, 100)
    floor.advance(Floor({0: 9}, 200))
    assert floor.current == Floor({0: 9}, 200)

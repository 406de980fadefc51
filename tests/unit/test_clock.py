"""Due times given to the microsecond (``chronos.clock.ceil_ms``): never rounded early."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from chronos.clock import ceil_ms, floor_ms
from chronos.pipeline.jobs.requests import deliver_at_ms


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 11, 28, 12, 0, 0, 0, tzinfo=UTC), 1_795_867_200_000),
        (datetime(2026, 11, 28, 12, 0, 0, 1, tzinfo=UTC), 1_795_867_200_001),
        (datetime(2026, 11, 28, 12, 0, 0, 999, tzinfo=UTC), 1_795_867_200_001),
        (datetime(2026, 11, 28, 12, 0, 0, 1000, tzinfo=UTC), 1_795_867_200_001),
        (datetime(2026, 11, 28, 12, 0, 0, 1001, tzinfo=UTC), 1_795_867_200_002),
        (datetime(2100, 1, 1, 0, 0, 0, 2600, tzinfo=UTC), 4_102_444_800_003),
        (datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC), 0),
        (
            datetime(2026, 11, 28, 13, 0, 0, 400, tzinfo=timezone(timedelta(hours=1))),
            1_795_867_200_001,
        ),
    ],
)
def test_a_due_time_rounds_up_to_the_next_millisecond(moment: datetime, expected: int) -> None:
    """Mutant caught: round() (the nearest millisecond: up to 0.5 ms early, issue 62)."""
    assert ceil_ms(moment) == expected


def test_the_pipeline_reads_a_microsecond_due_time_the_same_way() -> None:
    assert deliver_at_ms("2026-11-28T12:00:00.000400Z") == 1_795_867_200_001
    assert deliver_at_ms("1795867200000") == 1_795_867_200_000


def test_an_until_rounds_down() -> None:
    """A review of the first fix: an ``until`` of 11:59:59.9995 rounded up let a 12:00 fire in."""
    assert deliver_at_ms("2026-11-28T11:59:59.9995Z", "until", round_up=False) == 1_795_867_199_999
    assert floor_ms(datetime(2026, 11, 28, 12, 0, 0, 999, tzinfo=UTC)) == 1_795_867_200_000

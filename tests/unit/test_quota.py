"""Pending-message quotas (chronos/web/quota.py): what counts, for how long, and Retry-After."""

from __future__ import annotations

import math

from chronos.web.quota import PendingQuota, counted_until

NOW = 1_800_000_000_000  # a whole minute
MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000


def test_a_message_counts_until_the_end_of_its_due_minute() -> None:
    assert counted_until(NOW + 1, NOW) == NOW + MINUTE
    assert counted_until(NOW + MINUTE, NOW) == NOW + MINUTE
    assert counted_until(NOW - 5_000, NOW) == NOW + MINUTE  # due already: still to deliver


def test_more_than_a_day_ahead_it_counts_to_the_end_of_its_hour() -> None:
    due = NOW + DAY + 1
    assert counted_until(due, NOW) == -(-due // HOUR) * HOUR >= due


def test_admitted_up_to_the_limit_then_refused_until_enough_fall_due() -> None:
    quota = PendingQuota()
    assert quota.admit("t", 3, 2, NOW) == 0
    quota.settle("t", [NOW + 10 * MINUTE, NOW + 20 * MINUTE], NOW)
    assert quota.admit("t", 3, 1, NOW) == 0
    quota.settle("t", [NOW + 30 * MINUTE], NOW)
    assert quota.pending("t", NOW) == 3
    # Two more need the two soonest to stop counting: 20 minutes.
    assert quota.admit("t", 3, 2, NOW) == 20 * 60
    assert quota.admit("other", 3, 3, NOW) == 0  # per token
    assert quota.pending("t", NOW + 10 * MINUTE) == 2
    assert quota.admit("t", 3, 1, NOW + 10 * MINUTE) == 0


def test_reservations_count_until_settled_or_released() -> None:
    quota = PendingQuota()
    assert quota.admit("t", 2, 2, NOW) == 0
    assert quota.admit("t", 2, 1, NOW) > 0  # in flight to Kafka: counted
    quota.release("t", 2)  # Kafka did not acknowledge
    assert quota.admit("t", 2, 2, NOW) == 0


def test_a_batch_larger_than_the_quota_can_never_pass() -> None:
    assert PendingQuota().admit("t", 5, 6, NOW) == math.inf


def test_a_repeat_counts_its_occurrences() -> None:
    """Issue 62: a repeat was one message to max_pending and messages_per_s, whatever its
    ``times``. Reserved, settled and expired by its occurrences."""
    quota = PendingQuota()
    assert quota.admit("t", 100, 60, NOW) == 0.0  # a repeat of 60 occurrences
    assert quota.admit("t", 100, 60, NOW) > 0, "60 reserved + 60 > 100"
    quota.settle("t", [NOW + 30_000], NOW, weights=[60])
    assert quota.pending("t", NOW) == 60
    assert quota.admit("t", 100, 41, NOW) > 0 and quota.admit("t", 100, 40, NOW) == 0.0
    assert quota.admit("t", 100, 101, NOW) == math.inf
    assert quota.pending("t", NOW + 61_000) == 0, "its last occurrence's minute ended"


def test_what_a_request_costs_is_its_deliveries() -> None:
    from chronos.repeat import Repeat, RepeatKind
    from proxy.client import DelayClient, DelayRequest

    client = DelayClient()  # validates and encodes without connecting
    repeat = Repeat(RepeatKind.FIXED, interval_ms=1000, times=10_000)
    one, repeated = client.prepare(
        [
            DelayRequest(topic="t", value=b"v", delay=1.0),
            DelayRequest(topic="t", value=b"v", delay=1.0, repeat=repeat),
        ]
    )
    assert (one.deliveries, repeated.deliveries) == (1, 10_000)
    assert one.last_due_ms == one.deliver_at_ms
    assert repeated.last_due_ms == repeated.deliver_at_ms + 9_999 * 1000

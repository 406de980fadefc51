"""The token bucket behind topic rates (``delivery/pacing.py``) and token rates
(``web/guard.py``), on times the test gives it."""

from __future__ import annotations

import pytest

from chronos.token_bucket import TokenBucket


def test_a_bucket_lets_out_its_burst_then_its_rate() -> None:
    bucket = TokenBucket(rate=10, burst=3, now_s=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_s(0.0) == 0.1
    assert bucket.take(0.1) and not bucket.take(0.1)
    assert sum(bucket.take(100.0) for _ in range(10)) == 3  # saves no more than its burst


def test_a_cost_of_several_tokens_waits_until_all_are_there() -> None:
    """Mutants caught: a cost taken as one token, a cost taken on credit."""
    bucket = TokenBucket(rate=2, burst=4, now_s=0.0)
    assert bucket.take(0.0, cost=3) and not bucket.take(0.0, cost=3)
    assert bucket.wait_s(0.0, cost=3) == pytest.approx(1.0)  # 1 there, 2 more at 2/s
    assert not bucket.take(0.5, cost=3)
    assert bucket.take(1.0, cost=3)


def test_a_rate_that_is_not_exact_in_binary_still_counts_whole_tokens() -> None:
    bucket = TokenBucket(rate=10, burst=1, now_s=100.0)
    assert bucket.take(100.0)
    assert bucket.take(100.1)  # (100.1 - 100.0) s x 10/s is 0.9999999999999432 in binary


def test_a_new_rate_keeps_what_was_saved_up_to_its_burst() -> None:
    """Mutant caught: a rate change that fills the bucket (each change let a burst out)."""
    bucket = TokenBucket(rate=10, burst=10, now_s=0.0)
    assert sum(bucket.take(0.0) for _ in range(10)) == 10
    bucket.set_rate(rate=100, burst=100, now_s=0.0)
    assert not bucket.take(0.0)
    assert bucket.wait_s(0.0) == pytest.approx(0.01)
    bucket.set_rate(rate=1, burst=2, now_s=10.0)  # 10 s at 100/s saved 100: 2 are kept
    assert [bucket.take(10.0) for _ in range(3)] == [True, True, False]

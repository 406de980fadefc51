"""When a cluster member claims a partition again after a claim came to nothing."""

from __future__ import annotations

from chronos.cluster.ownership import ClaimBackoff


def test_a_failed_or_lost_claim_waits_a_second() -> None:
    backoff = ClaimBackoff()
    backoff.failed(3, now=10.0)
    assert backoff.waiting(10.9) == {3}
    assert backoff.waiting(11.0) == frozenset()


def test_a_claim_whose_log_end_was_not_learned_is_asked_again_sooner_then_less_often() -> None:
    """After a broker's restart the first question of a log's end failed once: asked again
    after 0.2 s, not 1 s; a broker still away is asked less often each time, at most 1 s."""
    backoff = ClaimBackoff()
    now = 0.0
    for wait in (0.2, 0.4, 0.8, 1.0, 1.0):
        backoff.failed(7, now, end_unknown=True)
        assert 7 in backoff.waiting(now + wait - 0.01)
        now += wait + 0.01
        assert 7 not in backoff.waiting(now)


def test_a_decided_claim_starts_the_short_waits_over_and_partitions_wait_apart() -> None:
    backoff = ClaimBackoff()
    backoff.failed(1, 0.0, end_unknown=True)
    backoff.failed(1, 1.0, end_unknown=True)  # 0.4 s now
    backoff.decided(1)
    backoff.failed(1, 2.0, end_unknown=True)
    backoff.failed(2, 2.0)
    assert backoff.waiting(2.1) == {1, 2}
    assert backoff.waiting(2.2) == {2}  # 0.2 s again for 1; 2 waits its second
    backoff.failed(1, 3.0)  # a failure of another kind: the short waits start over
    backoff.failed(1, 4.0, end_unknown=True)
    assert backoff.waiting(4.2) == frozenset()

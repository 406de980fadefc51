"""Rates per target topic: held in due order, released as the bucket refills (a fake clock)."""

from __future__ import annotations

from chronos.delivery.job import DeliveryJob
from chronos.delivery.pacing import Pacing
from chronos.delivery.policies import Policies
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.settings import TopicPolicy
from chronos.store import keys
from tests.clocks import ManualClock

T0 = 1_700_000_000_000


def _job(n: int, topic: str = "slow") -> DeliveryJob:
    message = DelayMessage(f"m{n}", topic, None, b"v", [], T0)
    return DeliveryJob(keys.message_key(T0, f"m{n:06d}"), message, T0)


def _pacing(clock: ManualClock, metrics: CountingMetrics | None = None, **policy: object) -> Pacing:
    return Pacing(Policies({"slow": TopicPolicy.model_validate(policy)}), metrics, clock)


def test_held_jobs_go_out_in_the_order_they_came_at_the_rate() -> None:
    """Mutants caught: a job admitted past the ones held before it (reordered), a release that
    ignores the bucket."""
    clock = ManualClock()
    pacing = _pacing(clock, rate=1000, burst=2)
    jobs = [_job(n) for n in range(10)]
    admitted = [j for j in jobs if pacing.admit(j, "slow", T0)]
    assert admitted == jobs[:2] and pacing.held() == 8
    clock.now += 0.001  # one token
    (first,) = pacing.release(T0 + 1)
    assert first is jobs[2]
    clock.now += 0.0025
    assert pacing.release(T0 + 3) == jobs[3:5]  # 2.5 tokens, capped at the burst of 2
    assert pacing.admit(_job(99), "slow", T0) is False  # behind the held ones, token or not
    clock.now += 1.0
    assert pacing.release(T0 + 1000) == jobs[5:7]
    assert pacing.held() == 4


def test_a_topic_without_a_rate_is_never_held() -> None:
    pacing = _pacing(ManualClock(), rate=1, burst=1)
    assert all(pacing.admit(_job(n, "fast"), "fast", T0) for n in range(100))
    assert pacing.next_release_s() is None
    assert pacing.admit(_job(0, "slow"), "slow", T0)
    assert not pacing.admit(_job(1, "slow"), "slow", T0)  # the limited one is
    assert pacing.next_release_s() == 1.0


def test_the_wait_is_each_topic_s_lateness() -> None:
    clock, metrics = ManualClock(), CountingMetrics()
    pacing = _pacing(clock, metrics, rate=10, burst=1)
    assert pacing.admit(_job(0), "slow", T0 + 5)
    assert not pacing.admit(_job(1), "slow", T0 + 5)
    assert pacing.next_release_s() == 0.1
    clock.now += 0.1
    pacing.release(T0 + 105)
    summary = metrics.histograms()["topic_lateness_ms:slow"]
    assert (sum(summary.buckets), summary.sum_ms) == (2, 5 + 105)


def test_no_rate_anywhere_means_the_senders_need_not_ask() -> None:
    policies = Policies({"slow": TopicPolicy(max_attempts=3)})
    pacing = Pacing(policies, CountingMetrics(), ManualClock())
    assert not pacing.active
    policies.set("*", TopicPolicy(rate=5))
    assert pacing.active


def test_a_rate_set_live_holds_the_next_jobs_and_one_cleared_lets_them_go() -> None:
    """Mutants caught: buckets never rebuilt after a change (the new rate ignored), held jobs
    kept once their topic lost its rate."""
    clock = ManualClock()
    policies = Policies({})
    pacing = Pacing(policies, CountingMetrics(), clock)
    assert pacing.admit(_job(0), "slow", T0)  # no rate yet: known as unlimited
    policies.set("slow", TopicPolicy(rate=1, burst=1))
    assert pacing.admit(_job(1), "slow", T0)
    assert not pacing.admit(_job(2), "slow", T0)
    assert not pacing.admit(_job(3), "slow", T0)
    policies.set("slow", TopicPolicy(rate=1, burst=1))  # the same: nothing changes
    assert pacing.release(T0) == []
    policies.set("slow", None)
    assert [j.message.id for j in pacing.release(T0) if j.message] == ["m2", "m3"]
    assert pacing.held() == 0


def test_the_default_burst_is_a_tenth_of_a_second() -> None:
    assert TopicPolicy(rate=5000).burst_size == 500
    assert TopicPolicy(rate=3).burst_size == 1
    assert TopicPolicy(rate=5000, burst=7).burst_size == 7


def test_a_node_owning_a_share_of_the_partitions_paces_its_share_of_the_rate() -> None:
    """``node.owned_partitions``: a node of two partitions out of four holds half the rate.
    Mutant caught: the share ignored (the second job went 10 ms after the first)."""
    clock = ManualClock()
    policies = Policies({"slow": TopicPolicy(rate=100, burst=1)}, rate_share=0.5)
    pacing = Pacing(policies, None, clock)
    assert pacing.admit(_job(0), "slow", T0) and not pacing.admit(_job(1), "slow", T0)
    clock.now += 0.015
    assert pacing.release(T0 + 15) == []
    clock.now += 0.005
    assert [j.message and j.message.id for j in pacing.release(T0 + 20)] == ["m1"]

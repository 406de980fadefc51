"""A master's rate plan (``delivery/rate_plan.py``) on its own: GCRA slots, the order they keep,
and a transaction's undo."""

from __future__ import annotations

from chronos.delivery.policies import Policies
from chronos.delivery.rate_plan import RatePlan
from chronos.settings import TopicPolicy

T0 = 1_700_000_000_000


def _plan(**policy: object) -> RatePlan:
    return RatePlan(Policies({"slow": TopicPolicy.model_validate(policy)}))


def test_a_conforming_message_waits_behind_one_planned_past_the_cancel_gate() -> None:
    """The gate holds ``upto`` behind ``now``; the tolerance lets a later message conform
    before an earlier planned one went. Mutant caught: conforming messages sent at once."""
    plan = _plan(rate=10, burst=2)
    assert plan.slot_for("a", "slow", T0, T0, T0, T0) is None
    assert plan.slot_for("b", "slow", T0, T0, T0, T0) is None
    assert plan.slot_for("c", "slow", T0, T0, T0, T0) == T0 + 100
    plan.committed(["a", "b", "c"])
    # At T0 + 250 with the gate at T0 + 50, c (slot T0 + 100) has not gone yet.
    assert plan.slot_for("d", "slow", T0 + 40, T0 + 40, T0 + 250, T0 + 50) == T0 + 100


def test_a_topic_without_a_rate_and_a_planned_message_go_at_once() -> None:
    plan = _plan(rate=1, burst=1)
    assert plan.slot_for("a", "fast", T0, T0, T0, T0) is None
    assert plan.slot_for("b", "slow", T0, T0, T0, T0) is None
    assert plan.slot_for("c", "slow", T0, T0, T0, T0) == T0 + 1000
    plan.committed(["b", "c"])
    assert plan.planned() == 1
    assert plan.slot_for("c", "slow", T0 + 1000, T0, T0 + 1000, T0 + 1000) is None
    plan.committed(["c"])
    assert plan.planned() == 0


def test_an_abort_undoes_the_transaction_s_plans_only() -> None:
    plan = _plan(rate=10, burst=1)
    plan.slot_for("a", "slow", T0, T0, T0, T0)
    assert plan.slot_for("b", "slow", T0, T0, T0, T0) == T0 + 100
    plan.committed(["a", "b"])
    assert plan.slot_for("c", "slow", T0, T0, T0, T0) == T0 + 200
    plan.aborted()
    assert plan.planned() == 1 and plan.backlog(T0) == {"slow": T0 + 200}
    assert plan.slot_for("c", "slow", T0, T0, T0, T0) == T0 + 200


def test_a_rate_set_live_applies_to_the_next_message() -> None:
    policies = Policies({})
    plan = RatePlan(policies)
    assert not plan.active and plan.slot_for("a", "slow", T0, T0, T0, T0) is None
    policies.set("slow", TopicPolicy(rate=10, burst=1))
    assert plan.active and plan.limited("slow")
    assert plan.slot_for("b", "slow", T0, T0, T0, T0) is None
    assert plan.slot_for("c", "slow", T0, T0, T0, T0) == T0 + 100

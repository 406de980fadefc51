"""Delivery policies: configured, replaced live by the policy topic's records, cleared back."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

import pytest

from chronos.delivery.policies import Policies, Rate, decode, encode
from chronos.settings import TopicPolicy, check_policy_topic

CONFIGURED = {"orders": TopicPolicy(max_attempts=3), "*": TopicPolicy(max_age_s=60)}


def test_a_live_policy_replaces_the_configured_one_whole_and_clearing_brings_it_back() -> None:
    """Mutant caught: a live record merged into the configured policy (a field the operator
    left out kept its configured value)."""
    policies = Policies(CONFIGURED)
    assert policies.policy_of("orders") == TopicPolicy(max_attempts=3)
    assert policies.set("orders", TopicPolicy(rate=50))
    assert policies.policy_of("orders") == TopicPolicy(rate=50)
    assert policies.set("orders", None)
    assert policies.policy_of("orders") == TopicPolicy(max_attempts=3)


def test_every_topic_without_its_own_takes_the_star_live_or_configured() -> None:
    policies = Policies(CONFIGURED)
    assert policies.policy_of("audit") == TopicPolicy(max_age_s=60)
    policies.set("*", TopicPolicy(rate=1))
    assert policies.policy_of("audit") == TopicPolicy(rate=1)
    assert policies.policy_of("orders") == TopicPolicy(max_attempts=3)  # its own wins
    assert Policies({}).policy_of("audit") is None


def test_a_change_bumps_the_version_and_an_unchanged_record_does_not() -> None:
    policies = Policies({})
    assert not policies.any_rate
    assert policies.set("orders", TopicPolicy(rate=5))
    assert (policies.version, policies.any_rate) == (1, True)
    assert not policies.set("orders", TopicPolicy(rate=5))
    assert policies.version == 1
    policies.set("orders", None)
    assert (policies.version, policies.any_rate) == (2, False)


def test_records_round_trip_and_bad_ones_name_their_field() -> None:
    policy = TopicPolicy(rate=2.5, burst=3, max_age_s=10)
    assert decode(encode(policy)) == policy
    assert encode(policy) == b'{"max_age_s":10.0,"rate":2.5,"burst":3}'  # the fields set
    with pytest.raises(ValueError, match="max_attempts"):
        decode(b'{"max_attempts": 0}')
    with pytest.raises(ValueError, match="max_tries"):
        decode(b'{"max_tries": 3}')
    with pytest.raises(ValueError):
        decode(b"not json")


def test_a_record_carries_only_the_fields_set() -> None:
    """A default sent along would read as set at the other end: a rate alone would turn the
    retries on there (``TopicPolicy.retries``)."""
    rate_only = decode(encode(TopicPolicy(rate=5)))
    assert rate_only == TopicPolicy(rate=5) and not rate_only.retries
    assert decode(encode(TopicPolicy(max_age_s=3))).retries


def test_only_topic_names_and_star_may_have_a_policy() -> None:
    assert check_policy_topic("pay.ments") == "pay.ments" and check_policy_topic("*") == "*"
    with pytest.raises(ValueError, match="not a Kafka topic name"):
        check_policy_topic("two words")


def test_the_admin_view_shows_both() -> None:
    policies = Policies(CONFIGURED)
    policies.set("audit", TopicPolicy(rate=5))
    shown = policies.as_json()
    assert shown["live"] == {
        "audit": {"rate": 5.0, "backoff_initial_ms": 100, "backoff_max_ms": 10000}
    }
    configured = shown["configured"]
    assert isinstance(configured, dict) and set(configured) == {"*", "orders"}


def test_the_http_body_of_a_policy_has_the_settings_fields_and_bounds() -> None:
    """The proxy's ``PolicyIn`` is strict JSON and leaves defaults unset; its fields and bounds
    must stay those of ``TopicPolicy``, or the API would accept what a node then refuses."""
    from annotated_types import Ge, Gt, Le
    from pydantic.fields import FieldInfo

    from proxy.http.schemas import PolicyIn

    def constraints(metadata: Iterable[object]) -> set[object]:
        found: set[object] = set()
        for item in metadata:
            if isinstance(item, Ge | Gt | Le):
                found.add(item)
            elif isinstance(item, FieldInfo):  # a Field(...) inside an Annotated type
                found |= constraints(item.metadata)
        return found

    def bounds(model: type[Any]) -> dict[str, set[object]]:
        """Each field's bounds, on the field or inside its type (``Annotated[int, Field(ge=1)]
        | None``, where the JSON schema writes them as JSON Schema does)."""
        out: dict[str, set[object]] = {}
        for name, info in model.model_fields.items():
            found = constraints(info.metadata)
            for member in get_args(info.annotation):
                found |= constraints(getattr(member, "__metadata__", ()))
            out[name] = found
        return out

    assert bounds(PolicyIn) == bounds(TopicPolicy)
    assert PolicyIn(rate=5).to_policy().model_fields_set == {"rate"}


def test_a_policy_change_through_the_proxy_is_the_admin_operation() -> None:
    from proxy.http.app import proxy_operation

    assert proxy_operation("PUT", "/v1/policies/orders") == "admin"
    assert proxy_operation("DELETE", "/v1/policies/*") == "admin"
    assert proxy_operation("DELETE", "/v1/messages/m1") == "cancel"


def test_a_topic_s_rate_is_shared_by_the_partitions_owners() -> None:
    """Each engine paces its share of a topic's rate (the inner partitions it delivers over
    all of them), a burst of one at the least. Mutant caught: the share ignored (a cluster
    of 16 partitions delivered 16 times the rate)."""
    policies = Policies({"slow": TopicPolicy(rate=4000, burst=400)}, rate_share=1 / 16)
    assert policies.rate_of("slow") == Rate(250.0, 25)
    assert policies.rate_of("fast") is None
    small = Policies({"slow": TopicPolicy(rate=4, burst=1)}, rate_share=1 / 16)
    assert small.rate_of("slow") == Rate(0.25, 1)
    assert Policies({"slow": TopicPolicy(rate=4)}).rate_of("slow") == Rate(4.0, 1)
    for wrong in (0.0, 1.5):
        with pytest.raises(ValueError, match="rate_share"):
            Policies({}, rate_share=wrong)

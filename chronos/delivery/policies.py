"""The delivery policy of each target topic: what ``delivery.topics`` configures, replaced by
what operators set live (``chronos policy set``), which every node reads from the compacted
policy topic (``<namespace>.policy``, ``node/policy_follower.py``).

A topic's live record replaces its configured policy whole; clearing it (a tombstone) brings
the configured one back. ``"*"`` works the same way and covers every topic without a policy of
its own, configured or live.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from chronos.settings import ANY_TOPIC, TopicPolicy


@dataclass(frozen=True, slots=True)
class Rate:
    """What one delivering engine holds of a topic's rate: messages a second and a burst."""

    per_s: float
    burst: int


class Policies:
    """Each topic's policy now; read by the delivering threads, changed by the follower.

    Parameters:
        configured: ``delivery.topics``.
        rate_share: the share of each topic's ``rate`` and ``burst`` the engine reading these
            holds: the inner partitions it delivers over all of them. A topic's rate is the
            cluster's, not each partition owner's: every owner (a cluster member's lane, a
            node that owns some partitions) paces its share, so the rate holds for the whole
            when the topic's messages spread over the partitions, as ids do by their hash.
    """

    def __init__(self, configured: Mapping[str, TopicPolicy], rate_share: float = 1.0) -> None:
        if not 0 < rate_share <= 1:
            raise ValueError(f"rate_share must be in (0, 1], not {rate_share}")
        self.rate_share = rate_share
        self._configured = dict(configured)
        self._live: dict[str, TopicPolicy] = {}
        self._lock = threading.Lock()
        #: Bumped at each change: caches of policies (the pacing's buckets) look at it.
        self.version = 0
        self.any_rate = self._has_rate()

    def policy_of(self, topic: str) -> TopicPolicy | None:
        """``topic``'s policy, else ``"*"``'s, else None."""
        live, configured = self._live, self._configured
        if not live and not configured:
            return None
        found = live.get(topic) or configured.get(topic)
        if found is not None:
            return found
        return live.get(ANY_TOPIC) or configured.get(ANY_TOPIC)

    def rate_of(self, topic: str) -> Rate | None:
        """``topic``'s rate here (its share of it), None without one: a burst of at least
        one, so a share below one message lets each owner send one at once."""
        policy = self.policy_of(topic)
        if policy is None or policy.rate is None:
            return None
        share = self.rate_share
        return Rate(policy.rate * share, max(1, round(policy.burst_size * share)))

    def set(self, topic: str, policy: TopicPolicy | None) -> bool:
        """Apply a record of the policy topic (None: cleared); True when it changed a policy."""
        with self._lock:
            if self._live.get(topic) == policy:
                return False
            live = dict(self._live)  # readers take the dict without the lock: replace it whole
            if policy is None:
                live.pop(topic, None)
            else:
                live[topic] = policy
            self._live = live
            self.version += 1
            self.any_rate = self._has_rate()
            return True

    def _has_rate(self) -> bool:
        every = (*self._configured.values(), *self._live.values())
        return any(policy.rate is not None for policy in every)

    def as_json(self) -> dict[str, object]:
        """What ``GET /v1/policies`` answers: the configured and the live policies."""
        live = self._live

        def dump(policies: Mapping[str, TopicPolicy]) -> dict[str, object]:
            return {t: p.model_dump(exclude_none=True) for t, p in sorted(policies.items())}

        return {"configured": dump(self._configured), "live": dump(live)}


def encode(policy: TopicPolicy) -> bytes:
    """A policy record's value: the fields set (a default sent along would read as set)."""
    return policy.model_dump_json(exclude_unset=True).encode()


def decode(value: bytes) -> TopicPolicy:
    """A policy record's value; ``ValueError`` naming what is wrong."""
    try:
        return TopicPolicy.model_validate_json(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "policy"
        raise ValueError(f"{where}: {first['msg']}") from exc

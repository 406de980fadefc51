"""Rates per target topic in a replica group: a master *plans* each message of a rate-limited
topic that falls due faster than its ``rate`` into a later slot, instead of holding it.

Why not a node alone's :mod:`delivery.pacing`: a master's delivery is a transaction over a range
of slots, and what it does not publish must be moved out of that range, durably, or the cut
would pass it. So a message over the rate moves to the slot its token comes in (a progress
state, as a deferred retry moves) and goes out there without asking again. The bookkeeping is a
GCRA per topic (the "virtual scheduling" form of a token bucket): ``tat`` is the theoretical
arrival time of the topic's next message; one conforms while ``tat - tolerance <= now``, and
each one, sent or planned, moves ``tat`` on by ``1000 / rate`` ms. Planned messages take slots in
the order they came (due order), and a message due later never goes before them: it finds
``tat`` past them.

The plan survives a takeover: each cut carries the ``tat`` of every topic with a backlog
(``Cut.paced``). The successor starts from it, and lets the backlog it inherits (messages at a
slot after their due time, up to the end of that plan) go at their slots: it cannot tell them
from a message that arrived late into that window, which therefore skips the rate too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from chronos.delivery.policies import Policies
from chronos.settings import TopicPolicy
from chronos.types import EpochMs


@dataclass(slots=True)
class _Topic:
    """One limited topic's plan: its interval and tolerance (ms), and its ``tat``."""

    interval_ms: float
    tolerance_ms: float
    tat: float
    #: The latest slot a message of the topic was planned into.
    last_slot: EpochMs = 0


class RatePlan:
    """Slots for a master's messages of rate-limited topics; one per transaction loop.

    Use: ``slot_for`` for each first attempt in a transaction, then ``committed`` or
    ``aborted``: an aborted transaction planned nothing.

    Parameters:
        policies: each topic's policy now (its ``rate`` and ``burst``).
        inherited: the ``tat`` per topic of the last committed cut (the previous master's plan).
    """

    def __init__(self, policies: Policies, inherited: Mapping[str, float] | None = None) -> None:
        self._policies = policies
        self._version = -1
        self._inherited = dict(inherited or {})
        #: The end of the inherited backlog per topic: slots up to it were planned before.
        self._inherited_end: dict[str, float] = {}
        self._topics: dict[str, _Topic | None] = {}
        #: Ids planned and not yet delivered (they go at their slot without a token), with what
        #: their lateness counts from: their due time, or the slot they were stored at if later.
        self._planned: dict[str, EpochMs] = {}
        #: What the open transaction changed, undone by ``aborted``.
        self._saved: dict[str, float] = {}
        self._saved_slot: dict[str, EpochMs] = {}
        self._new: list[str] = []

    @property
    def active(self) -> bool:
        """Whether any topic has a rate or anything planned is still to come."""
        return self._policies.any_rate or bool(self._planned) or bool(self._inherited_end)

    def _topic(self, name: str, now_ms: EpochMs) -> _Topic | None:
        if self._version != self._policies.version:
            self._version = self._policies.version
            self._topics = {t: self._new_topic(t, old, now_ms) for t, old in self._topics.items()}
        if name not in self._topics:
            self._topics[name] = self._new_topic(name, None, now_ms)
        return self._topics[name]

    def _new_topic(self, name: str, old: _Topic | None, now_ms: EpochMs) -> _Topic | None:
        policy = self._policies.policy_of(name)
        if policy is None or policy.rate is None:
            return None
        interval, tolerance = _shape(policy)
        if old is not None:
            return _Topic(interval, tolerance, old.tat, old.last_slot)
        tat = self._inherited.pop(name, None)
        if tat is None:
            return _Topic(interval, tolerance, float(now_ms))
        self._inherited_end[name] = tat - tolerance
        return _Topic(interval, tolerance, tat, math.ceil(tat - tolerance - interval))

    def limited(self, topic: str) -> bool:
        """Whether ``topic`` has a rate (as of the plan's last look at the policies)."""
        found = self._topics.get(topic, False)
        if found is False or self._version != self._policies.version:
            policy = self._policies.policy_of(topic)
            return policy is not None and policy.rate is not None
        return found is not None

    def slot_for(
        self,
        ident: str,
        topic: str,
        slot_ms: EpochMs,
        due_ms: EpochMs,
        now_ms: EpochMs,
        upto: EpochMs,
    ) -> EpochMs | None:
        """Where the message ``ident`` (at ``slot_ms``, due ``due_ms``) goes in a transaction
        delivering up to ``upto`` at ``now_ms``: None to publish it now, else the later slot
        its token comes in.

        A message that conforms still waits while an earlier one is planned past ``upto``
        (the cancel gate holds ``upto`` behind ``now``, which the tolerance may reach): it
        takes that one's slot, and the transaction delivering the slot puts them in due order.
        """
        if ident in self._planned:
            return None
        plan = self._topic(topic, now_ms)
        if plan is None:
            return None
        end = self._inherited_end.get(topic)
        if end is not None:
            if slot_ms > due_ms and slot_ms <= end:
                return None  # planned by the previous master
            if now_ms > end:
                del self._inherited_end[topic]
        if topic not in self._saved:
            self._saved[topic] = plan.tat
            self._saved_slot[topic] = plan.last_slot
        tat = max(plan.tat, float(now_ms))
        plan.tat = tat + plan.interval_ms
        conforms = tat - plan.tolerance_ms <= now_ms
        if conforms and plan.last_slot <= upto:
            return None
        slot = (
            plan.last_slot if conforms else max(plan.last_slot, math.ceil(tat - plan.tolerance_ms))
        )
        plan.last_slot = slot
        self._planned[ident] = max(due_ms, slot_ms)
        self._new.append(ident)
        return slot

    def committed(self, tried: list[str]) -> None:
        """The transaction committed: its plans stand; the ids it ``tried`` and did not plan
        went out (or to the dead-letter topic, or to a retry): no longer planned."""
        planned = self._planned
        if planned:
            new = set(self._new)
            for ident in tried:
                if ident not in new:
                    planned.pop(ident, None)
        self._saved.clear()
        self._saved_slot.clear()
        self._new.clear()

    def aborted(self) -> None:
        """The transaction aborted: what it planned never happened."""
        for topic, tat in self._saved.items():
            plan = self._topics.get(topic)
            if plan is not None:
                plan.tat, plan.last_slot = tat, self._saved_slot[topic]
        for ident in self._new:
            self._planned.pop(ident, None)
        self._saved.clear()
        self._saved_slot.clear()
        self._new.clear()

    def backlog(self, now_ms: EpochMs) -> dict[str, float]:
        """The ``tat`` of each topic whose plan reaches past ``now_ms`` (what a cut carries)."""
        found = {t: p.tat for t, p in self._topics.items() if p is not None and p.tat > now_ms}
        # An inherited plan not used yet (no message of its topic came) is still the plan.
        return {t: tat for t, tat in self._inherited.items() if tat > now_ms} | found

    def lateness_base(self, ident: str) -> EpochMs | None:
        """What a planned message's lateness counts from (its slot moved); None if not
        planned by this master."""
        return self._planned.get(ident)

    def planned(self) -> int:
        """How many planned messages are still to go."""
        return len(self._planned)


def _shape(policy: TopicPolicy) -> tuple[float, float]:
    """(interval, tolerance) in ms of a policy with a rate: a burst of ``burst_size`` at once."""
    assert policy.rate is not None
    interval = 1000.0 / policy.rate
    return interval, (policy.burst_size - 1) * interval

"""Rates per target topic in a replica group: a master *plans* each message of a rate-limited
topic that falls due faster than its ``rate`` into a later slot, instead of holding it.

Why not a node alone's :mod:`delivery.pacing`: a master's delivery is a transaction over a range
of slots, and what it does not publish must be moved out of that range, durably, or the cut
would pass it. So a message over the rate moves to a later slot (a progress state, as a
deferred retry moves) and goes out there without asking again.

**Steps, not a single clock.** The bookkeeping is a GCRA per topic (the "virtual scheduling"
form of a token bucket): each message takes a *theoretical arrival time*, one step of
``1000 / rate`` ms each, and goes at that time less the tolerance (``burst - 1`` steps), never
before its earliest time. A GCRA keeps only the next free time (``tat``); here each topic keeps
the set of steps taken (``_Topic``), because a master also plans *ahead* (below), so it plans
messages out of the order they are delivered in, and a message planned late must still find
a free step before the plan's end instead of queueing behind all of it. Planned in due order,
the two are the same; in any window of one second at most ``rate + burst`` messages go.

**Ahead of time.** Moving a message costs a progress record and a store write on every
replica (about 50 µs on the master). A burst of 100,000 planned as it falls due held the
master's frontier, and every other topic behind it, for seconds, and what was planned for
those seconds then went out at once. So the transaction loop also reads what falls due in
the next ``group.rate_lookahead_ms`` (``ahead_for``, in key order, a bounded number per
transaction) and plans it before it is due: at due time the burst is already spread over its
slots. A message that conforms stays where it is (no move), but takes its step.

**What goes out, counted.** A plan holds ``rate + burst`` in every second of *slots*; what
Kafka stamps is when the transaction produced it, a few milliseconds after its slot, and by
more when a transaction waited on the one before. So each send of a limited topic is also
counted in the trailing second as it goes (``admit``): one that would take it past ``rate +
burst`` moves to the slot where the count has room again (a few, at a burst's edges).

**Order.** Messages planned ahead come in due order, and a message never goes before one
moved behind it (``last_moved``); messages moved into one slot are put in due order by the
transaction that delivers them. A message that arrives after the look-ahead passed its slot
is planned as it falls due: into the first free step from now, so behind a backlog of its
topic, and at once when there is none.

**A successor.** Each cut carries the end of every topic's backlog (``Cut.paced``, as a
theoretical arrival time, which an earlier release also reads) and how far the look-ahead
read (``Cut.ahead_ms``). A successor lets what the previous master planned go at its slots:
a message moved past its due time up to its topic's backlog end, and any message of a limited
topic at or before ``ahead_ms``. It cannot tell those from a message that arrived late into
that span, which therefore skips the rate; its own plans start after the inherited backlog.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from chronos.delivery.policies import Policies, Rate
from chronos.types import EpochMs

#: The trailing window ``admit`` counts sends in, ms: a second, and the time a transaction
#: takes to produce what it planned at its start (its records' timestamps are that much later).
_SENT_WINDOW_MS = 1_050

#: Offsets this close are the same: a step's offset is computed at epoch magnitudes (~1.8e12
#: ms), where a double resolves 2.4e-4 ms.
_SAME_MS = 1e-3


@dataclass(slots=True)
class _Topic:
    """One limited topic's plan: the theoretical times its messages took.

    A GCRA's theoretical arrival times, kept as a set instead of a single clock: time is cut
    into steps of ``interval_ms`` (``1000 / rate``), each message takes one step and goes at
    its theoretical time less ``tolerance_ms`` (``(burst - 1)`` steps: a burst after a quiet
    spell), never before its earliest time. A step's theoretical time is its start, or later
    within it: a message that takes a step after its start (a lone one, at its own time)
    pushes the steps that follow it by as much (``offset_before``), so in due order this is a
    GCRA exactly, never two messages closer than ``interval_ms`` past the tolerance. A
    message planned later than messages due after it takes the first free step from its own
    time that leaves a whole interval before the next step taken (``closed``, ``crowds``),
    so that holds out of order too.
    """

    name: str
    interval_ms: float
    tolerance_ms: float
    #: Steps taken (``step``) with how far past its start each one's theoretical time is
    #: (0 up to ``interval_ms``), and the highest one.
    taken: dict[int, float] = field(default_factory=dict)
    highest: int = 0
    #: Steps below it count as taken: an inherited plan's; the inherited theoretical time is
    #: this far past the floor's start.
    floor: int = 0
    floor_offset: float = 0.0
    #: The latest slot a message of the topic was moved to (0: none), and the due time of
    #: the first message moved since the moves last caught up with their due times: a
    #: message due before it may go before them.
    last_moved: EpochMs = 0
    backlog_due: EpochMs = 0
    #: [full_from, full_to): steps found closed (only an abort frees one).
    full_from: int = 0
    full_to: int = 0
    #: How many steps were taken at the last ``forget_before``.
    kept: int = 0
    #: Most sends in ``_SENT_WINDOW_MS``, and when the latest ones went (ms, ascending).
    limit: int = 1
    sent: deque[EpochMs] = field(default_factory=deque)
    #: The slot the trailing count last moved a message to, and that message's lateness
    #: base: until the slot may be delivered, a message of the topic not due before it goes
    #: behind it (``admit``).
    wait_slot: EpochMs = 0
    wait_base: EpochMs = 0

    def step(self, t: float) -> int:
        """The step ``t`` falls in: a message at ``t`` taking it goes at ``t`` (a GCRA's
        ``tat = max(tat, t)``)."""
        return math.floor(t / self.interval_ms + 1e-9)

    def offset_before(self, step: int) -> float:
        """How far past its start ``step``'s theoretical time is at the least: as far as the
        step before's, when taken (a GCRA's ``tat`` is the previous one's plus an interval)."""
        before = self.taken.get(step - 1)
        if before is not None:
            return before
        return self.floor_offset if step == self.floor else 0.0

    def closed(self, step: int) -> bool:
        """Whether no message may take ``step`` whatever its time: taken, or between two
        taken steps whose offsets leave it less than an interval before the next (a message
        taking it would go at the step before's offset at least). Only an abort or
        ``forget_before`` opens it again."""
        taken = self.taken
        if step in taken:
            return True
        after = taken.get(step + 1)
        return after is not None and self.offset_before(step) > after + _SAME_MS

    def crowds(self, step: int, earliest: EpochMs) -> bool:
        """Whether a message not due before ``earliest``, taking ``step`` (not closed), would
        go so far into it that the next step, taken, follows it closer than an interval (a
        message planned out of order between two taken steps: the review's 150 ms at 4/s)."""
        after = self.taken.get(step + 1)
        return after is not None and earliest - step * self.interval_ms > after + _SAME_MS

    def first_open(self, start: int) -> int:
        """The first step from ``start`` that is not closed, past the run of closed steps
        found before (``full_from``, ``full_to``), which it extends: a burst planned ahead
        is walked once, not once per message planned behind it."""
        step = start
        if self.full_from <= step < self.full_to:
            step = self.full_to
        while self.closed(step):
            step += 1
        if step > start:
            if self.full_from <= start <= self.full_to:
                self.full_to = max(self.full_to, step)
            else:
                self.full_from, self.full_to = start, step
        return step

    def take(self, step: int, earliest: EpochMs) -> float:
        """Take ``step`` for a message not due before ``earliest``: its theoretical time."""
        start = step * self.interval_ms
        tat = max(float(earliest), start + self.offset_before(step))
        self.taken[step] = min(tat - start, self.interval_ms - 1e-6)
        self.highest = max(self.highest, step)
        return tat

    def goes_at(self, tat: float) -> EpochMs:
        """When a message of theoretical time ``tat`` may go at the earliest."""
        return math.ceil(tat - self.tolerance_ms - 1e-6)

    def tat(self) -> float:
        """The theoretical arrival time of the next message in due order."""
        after = max(self.highest, self.floor - 1) + 1
        return after * self.interval_ms + self.offset_before(after)


class RatePlan:
    """Slots for a master's messages of rate-limited topics; one per transaction loop.

    Use: ``slot_for`` for each first attempt falling due in a transaction and ``ahead_for``
    for each message read ahead, then ``committed`` or ``aborted``: an aborted transaction
    planned nothing.

    Parameters:
        policies: each topic's policy now (its ``rate`` and ``burst``).
        inherited: the backlog per topic of the last committed cut (``Cut.paced``).
        ahead_ms: how far the previous master's look-ahead read (``Cut.ahead_ms``).
    """

    def __init__(
        self,
        policies: Policies,
        inherited: Mapping[str, float] | None = None,
        ahead_ms: EpochMs | None = None,
    ) -> None:
        self._policies = policies
        self._version = -1
        self._inherited = dict(inherited or {})
        self._inherited_ahead = ahead_ms
        #: The end of the inherited backlog per topic: slots up to it were planned before.
        self._inherited_end: dict[str, float] = {}
        self._topics: dict[str, _Topic | None] = {}
        #: Ids planned and not yet delivered (they go at their slot without a token), with what
        #: their lateness counts from (their due time, or the slot they were stored at if
        #: later) and the slot they were planned into.
        self._planned: dict[str, tuple[EpochMs, EpochMs]] = {}
        #: (slot, id) of every plan, to forget plans whose slot passed undelivered (cancelled).
        self._by_slot: list[tuple[EpochMs, str]] = []
        #: The look-ahead's next key, and how far it (or the previous master's) read: both
        #: committed with the plans; the cut passes ``ahead_ms`` on.
        self.ahead_key: bytes | None = None
        self.ahead_ms: EpochMs | None = ahead_ms
        #: What the open transaction changed, undone by ``aborted``.
        self._charged: list[tuple[_Topic, int]] = []
        self._saved: dict[str, tuple[EpochMs, EpochMs, int, EpochMs, EpochMs]] = {}
        self._new: list[str] = []
        self._saved_ahead: tuple[bytes | None, EpochMs | None] | None = None
        self._admitted: list[_Topic] = []
        #: Plans ``admit`` replaced in the open transaction (restored by ``aborted``).
        self._replaced: list[tuple[str, tuple[EpochMs, EpochMs]]] = []

    @property
    def active(self) -> bool:
        """Whether any topic has a rate or anything planned is still to come."""
        return self._policies.any_rate or bool(self._planned) or bool(self._inherited_end)

    def _topic(self, name: str) -> _Topic | None:
        if self._version != self._policies.version:
            self._version = self._policies.version
            self._topics = {t: self._new_topic(t, old) for t, old in self._topics.items()}
        if name not in self._topics:
            self._topics[name] = self._new_topic(name, None)
        return self._topics[name]

    def _new_topic(self, name: str, old: _Topic | None) -> _Topic | None:
        rate = self._policies.rate_of(name)
        if rate is None:
            return None
        interval, tolerance = _shape(rate)
        limit = math.floor(rate.per_s) + rate.burst
        if old is not None and (old.interval_ms, old.tolerance_ms, old.limit) == (
            interval,
            tolerance,
            limit,
        ):
            # Its shape did not change (another topic's policy did): the plan stands, its
            # steps and their offsets too (rebuilt, a step went early or was given twice).
            return old
        plan = _Topic(name, interval, tolerance, limit=limit)
        if old is not None:
            # A new shape: its steps start after the old plan's backlog (what it planned in
            # place keeps its slots; the trailing second's count holds the new rate).
            plan.last_moved, plan.backlog_due = old.last_moved, old.backlog_due
            plan.floor = plan.step(old.last_moved) + 1 if old.last_moved else 0
            plan.sent = old.sent
            plan.wait_slot, plan.wait_base = old.wait_slot, old.wait_base
            return plan
        tat = self._inherited.pop(name, None)
        if tat is not None:
            self._inherited_end[name] = tat - tolerance
            plan.last_moved = math.ceil(tat - tolerance - interval)
            plan.floor = plan.step(tat)
            plan.floor_offset = max(0.0, tat - plan.floor * interval)
        return plan

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
        it is moved to.

        It goes now when it conforms (a free step within the tolerance of ``now_ms``) and no
        message of its topic due before it waits in a later slot past ``upto`` (the cancel gate
        holds ``upto`` behind ``now``): else it goes behind that one, in its slot, and the
        transaction delivering the slot puts them in due order.
        """
        if ident in self._planned:
            return None
        plan = self._topic(topic)
        if plan is None or self._planned_before(topic, slot_ms, due_ms, now_ms):
            return None
        waits = plan.last_moved > upto and due_ms >= plan.backlog_due
        after = plan.last_moved if waits else 0
        slot = self._place(plan, now_ms, after)
        if slot <= now_ms:  # conforms
            if not waits:
                return None
            slot = after  # behind the one planned past the gate, in its slot
        self._plan(ident, plan, max(due_ms, slot_ms), slot)
        return slot

    def ahead_for(self, ident: str, topic: str, slot_ms: EpochMs, due_ms: EpochMs) -> EpochMs:
        """Plan the message ``ident`` (at ``slot_ms``, due ``due_ms``) before it is due: the
        slot it goes at, ``slot_ms`` itself when it stays. Messages come in key order."""
        if ident in self._planned:
            return slot_ms
        plan = self._topic(topic)
        if plan is None or self._planned_before(topic, slot_ms, due_ms, None):
            return slot_ms
        after = plan.last_moved if plan.last_moved > slot_ms else 0
        slot = self._place(plan, slot_ms, after)
        if slot == slot_ms:
            self._remember(ident, max(due_ms, slot_ms), slot)  # stays: nothing moves
        else:
            self._plan(ident, plan, max(due_ms, slot_ms), slot)
        return slot

    def admit(
        self,
        ident: str,
        topic: str,
        base: EpochMs,
        now_ms: EpochMs,
        upto: EpochMs,
    ) -> EpochMs | None:
        """Count a message of ``topic`` that goes now (lateness counted from ``base``) in a
        transaction delivering up to ``upto``: None when the trailing second has room, else
        the slot it moves to instead.

        A message moved here waits for a slot the count gives at ``now_ms``, but goes only
        once the cancel gate lets ``upto`` reach it, later: one not due before it (a larger
        ``base``) that comes meanwhile goes behind it, into its slot, though the count may
        have room by then (it went first: the rate check saw pairs out of due order)."""
        plan = self._topic(topic)
        if plan is None:
            return None
        if plan.wait_slot > upto and base >= plan.wait_base:
            return self._move(ident, plan, base, plan.wait_slot)
        sent = plan.sent
        while sent and sent[0] <= now_ms - _SENT_WINDOW_MS:
            sent.popleft()
        if len(sent) < plan.limit:
            sent.append(now_ms)
            self._admitted.append(plan)
            return None
        slot = max(now_ms + 1, sent[len(sent) - plan.limit] + _SENT_WINDOW_MS)
        self._save(plan)
        if plan.wait_slot <= upto:
            plan.wait_slot, plan.wait_base = slot, base
        else:  # due before the one waiting: both wait for the later slot, this one first
            plan.wait_slot, plan.wait_base = max(plan.wait_slot, slot), base
        return self._move(ident, plan, base, plan.wait_slot)

    def _move(self, ident: str, plan: _Topic, base: EpochMs, slot: EpochMs) -> EpochMs:
        """``ident`` moves to ``slot`` instead of going now (its plan replaced)."""
        self._save(plan)
        before = self._planned.pop(ident, None)
        if before is not None:
            self._replaced.append((ident, before))
        self._plan(ident, plan, base, slot)
        return slot

    def _save(self, plan: _Topic) -> None:
        """What ``aborted`` restores of ``plan``, once per transaction."""
        if plan.name not in self._saved:
            self._saved[plan.name] = (
                plan.last_moved,
                plan.backlog_due,
                plan.highest,
                plan.wait_slot,
                plan.wait_base,
            )

    def _planned_before(
        self, topic: str, slot_ms: EpochMs, due_ms: EpochMs, now_ms: EpochMs | None
    ) -> bool:
        """Whether the previous master planned this message: it goes at its slot."""
        ahead = self._inherited_ahead
        if ahead is not None and slot_ms <= ahead:
            return True
        end = self._inherited_end.get(topic)
        if end is None:
            return False
        if slot_ms > due_ms and slot_ms <= end:
            return True
        if now_ms is not None and now_ms > end:
            del self._inherited_end[topic]
        return False

    def _place(self, plan: _Topic, earliest: EpochMs, after: EpochMs) -> EpochMs:
        """Take the first step from ``earliest`` a message may take (not closed, not crowding
        the next): when its message goes (not before ``after`` either: the order)."""
        first = max(plan.step(earliest), plan.floor)
        step = plan.first_open(first)
        if step == first and plan.crowds(first, earliest):
            # Only ``first`` depends on ``earliest``: a message taking a later step goes at
            # that step's offset, which ``closed`` already weighed.
            step = plan.first_open(first + 1)
        self._save(plan)
        tat = plan.take(step, earliest)
        self._charged.append((plan, step))
        return max(earliest, after, plan.goes_at(tat))

    def _plan(self, ident: str, plan: _Topic, base: EpochMs, slot: EpochMs) -> None:
        """``ident`` (lateness counted from ``base``) moves to ``slot``."""
        if plan.last_moved < base:
            plan.backlog_due = base  # the earlier moves go before this one's due time
        plan.last_moved = max(plan.last_moved, slot)
        self._remember(ident, base, slot)

    def _remember(self, ident: str, base: EpochMs, slot: EpochMs) -> None:
        """``ident`` is planned into ``slot`` by the open transaction."""
        self._planned[ident] = (base, slot)
        heapq.heappush(self._by_slot, (slot, ident))
        self._new.append(ident)

    def read_ahead(self, next_key: bytes, through_ms: EpochMs) -> None:
        """The look-ahead of the open transaction read up to ``next_key`` (exclusive), every
        message with a slot up to ``through_ms`` among them."""
        if self._saved_ahead is None:
            self._saved_ahead = (self.ahead_key, self.ahead_ms)
        self.ahead_key = next_key
        self.ahead_ms = through_ms if self.ahead_ms is None else max(self.ahead_ms, through_ms)

    def committed(self, tried: list[str], upto: EpochMs | None = None) -> None:
        """The transaction (delivering up to ``upto``) committed: its plans stand; the ids it
        ``tried`` and did not plan went out (or to the dead-letter topic, or to a retry): no
        longer planned, nor is a plan whose slot it passed (a message cancelled meanwhile)."""
        planned = self._planned
        if planned:
            new = set(self._new)
            for ident in tried:
                if ident not in new:
                    planned.pop(ident, None)
            by_slot = self._by_slot
            while upto is not None and by_slot and by_slot[0][0] <= upto:
                slot, ident = heapq.heappop(by_slot)
                found = planned.get(ident)
                if found is not None and found[1] == slot and ident not in new:
                    del planned[ident]
        self._settle()

    def aborted(self) -> None:
        """The transaction aborted: what it planned never happened."""
        for plan, step in self._charged:
            plan.taken.pop(step, None)
            plan.full_from = plan.full_to = 0
        for name, (last, due, highest, wait_slot, wait_base) in self._saved.items():
            topic = self._topics.get(name)
            if topic is not None:
                topic.last_moved, topic.backlog_due, topic.highest = last, due, highest
                topic.wait_slot, topic.wait_base = wait_slot, wait_base
        for ident in self._new:
            self._planned.pop(ident, None)
        if self._saved_ahead is not None:
            self.ahead_key, self.ahead_ms = self._saved_ahead
        for plan in reversed(self._admitted):
            plan.sent.pop()
        self._planned.update(self._replaced)
        self._settle()

    def _settle(self) -> None:
        self._charged.clear()
        self._saved.clear()
        self._new.clear()
        self._saved_ahead = None
        self._admitted.clear()
        self._replaced.clear()

    def forget_before(self, now_ms: EpochMs) -> None:
        """Forget the steps whose messages went before ``now_ms`` (nothing plans there any
        more), once a topic's steps doubled since it last did."""
        for plan in self._topics.values():
            if plan is None or len(plan.taken) < max(1024, 2 * plan.kept):
                continue
            # No plan starts before the current step; the one before it holds its offset.
            current = plan.step(now_ms) - 1
            plan.taken = {step: at for step, at in plan.taken.items() if step >= current}
            plan.kept = len(plan.taken)
            plan.full_from = plan.full_to = 0

    def backlog(self, now_ms: EpochMs) -> dict[str, float]:
        """The theoretical arrival time of the next message of each topic whose plan reaches
        past ``now_ms`` (what a cut carries)."""
        found = {
            t: tat for t, p in self._topics.items() if p is not None and (tat := p.tat()) > now_ms
        }
        # An inherited plan not used yet (no message of its topic came) is still the plan.
        return {t: tat for t, tat in self._inherited.items() if tat > now_ms} | found

    def lateness_base(self, ident: str) -> EpochMs | None:
        """What a planned message's lateness counts from (its slot moved); None if not
        planned by this master."""
        found = self._planned.get(ident)
        return None if found is None else found[0]

    def planned(self) -> int:
        """How many planned messages are still to go."""
        return len(self._planned)


def _shape(rate: Rate) -> tuple[float, float]:
    """(interval, tolerance) in ms of a rate: a burst of ``rate.burst`` at once."""
    interval = 1000.0 / rate.per_s
    return interval, (rate.burst - 1) * interval

"""Repeat schedules: fixed interval N times, exponential backoff capped at a maximum gap, or
a cron expression in a time zone (``chronos/cron/``), up to N times and optionally until a
time.

Occurrences are numbered from 1; occurrence 1 is due at the message's first due time.
A fixed repeat is due at ``first + (k-1)*interval``. An exponential repeat waits
``min(interval * multiplier**(k-1), max_interval)`` between occurrence k and k+1, so
DDMQ Chronos' ``interval^k`` seconds is ``interval_ms=interval*1000, multiplier=interval``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from chronos import cron
from chronos.types import EpochMs


class CatchUp(enum.IntEnum):
    """What a repeat does with occurrences that fell due while nothing delivered them (a
    failover, an outage, a stop), or before it was scheduled.

    ``ALL`` (the default) delivers each one, oldest first, back to back, as long as it is
    overdue by at most the node's ``delivery.catch_up_window_s``; those older still collapse
    into one delivery (the latest of them), so a repeat far in the past does not flood.
    ``LATEST`` delivers only the latest overdue one (a heartbeat that only the current value
    matters for). The integer is the stored encoding.
    """

    ALL = 1
    LATEST = 2


class RepeatKind(enum.IntEnum):
    """How occurrences are spaced; the integer is the stored encoding."""

    FIXED = 1
    EXPONENTIAL = 2
    CRON = 3


@dataclass(frozen=True, slots=True)
class Repeat:
    """A repeat schedule.

    Parameters:
        kind: fixed, exponential or calendar (cron) spacing.
        interval_ms: the (first) gap between occurrences (0 for cron).
        times: total number of occurrences, the first one included.
        multiplier: growth factor of the gap (exponential only; 1 for fixed).
        max_interval_ms: cap of the gap (exponential only).
        catch_up: what happens to overdue occurrences (see ``CatchUp``).
        cron: the expression (cron only): a message's first due time is one of its fires.
        zone: the IANA time zone the expression is read in (cron only).
        until_ms: no occurrence after this instant (cron only; 0: bounded by ``times`` alone).
    """

    kind: RepeatKind
    interval_ms: int
    times: int
    multiplier: int = 1
    max_interval_ms: int = 0
    catch_up: CatchUp = CatchUp.ALL
    cron: str = ""
    zone: str = "UTC"
    until_ms: EpochMs = 0

    @classmethod
    def calendar(
        cls,
        expression: str,
        zone: str = "UTC",
        *,
        times: int,
        until_ms: EpochMs = 0,
        catch_up: CatchUp = CatchUp.ALL,
    ) -> Repeat:
        """A cron repeat: ``Repeat.calendar("0 9 * * 1-5", "Europe/Berlin", times=260)``; it
        starts at the first fire at or after the request's due time."""
        return cls(
            RepeatKind.CRON, 0, times, catch_up=catch_up, cron=expression, zone=zone,
            until_ms=until_ms,
        )  # fmt: skip

    def first_due(self, start: EpochMs) -> EpochMs:
        """Occurrence 1's due time for a request due at ``start``: a cron repeat's first fire
        at or after it, ``start`` itself otherwise."""
        if self.kind is RepeatKind.CRON:
            return cron.schedule_of(self.cron, self.zone).at_or_after(start)
        return start

    def is_last(self, first_due: EpochMs, occurrence: int) -> bool:
        """Whether no occurrence follows ``occurrence``: ``times`` reached or, for a cron
        repeat with ``until_ms``, the next fire past it."""
        if occurrence >= self.times:
            return True
        if self.until_ms:
            return self.due_of(first_due, occurrence + 1) > self.until_ms
        return False

    def following(self, first_due: EpochMs, occurrence: int, count: int) -> list[EpochMs]:
        """Due times of up to ``count`` occurrences after ``occurrence`` (status shows them)."""
        dues: list[EpochMs] = []
        due = self.due_of(first_due, occurrence)
        while len(dues) < count and not self.is_last(first_due, occurrence):
            due = self.next_due(first_due, occurrence, due)
            occurrence += 1
            dues.append(due)
        return dues

    def last_occurrence(self, first_due: EpochMs) -> int:
        """The number of the last occurrence: ``times``, or for a cron repeat with
        ``until_ms`` the last fire at or before it, if that comes first (counted: cost
        independent of ``times``)."""
        if not self.until_ms or self.times == 1:
            return self.times
        if self.kind is RepeatKind.CRON:
            more = cron.fires_between(
                self.cron, self.zone, first_due, self.until_ms, self.times - 1
            )
            return 1 + more
        occurrence = 1
        while not self.is_last(first_due, occurrence):
            occurrence += 1
        return occurrence

    def last_due(self, first_due: EpochMs) -> EpochMs:
        """Due time of the last occurrence."""
        return self.due_of(first_due, self.last_occurrence(first_due))

    def gap_after(self, occurrence: int) -> int:
        """Milliseconds between ``occurrence`` and the next one (fixed and exponential: a
        cron repeat's gaps depend on its first due, see ``due_of``)."""
        if self.kind is RepeatKind.CRON:
            raise ValueError("a cron repeat's gaps depend on its first due: use due_of")
        if self.kind is RepeatKind.FIXED:
            return self.interval_ms
        # Stop multiplying once the cap is reached, so huge exponents never build huge ints.
        gap = self.interval_ms
        for _ in range(occurrence - 1):
            if gap >= self.max_interval_ms:
                break
            gap *= self.multiplier
        return min(gap, self.max_interval_ms)

    def next_due(self, first_due: EpochMs, occurrence: int, due: EpochMs) -> EpochMs:
        """Due time of the occurrence after ``occurrence``, which is due at ``due``: one step,
        where ``due_of`` would count from the first."""
        if self.kind is RepeatKind.CRON:
            return self.due_of(first_due, occurrence + 1)  # cron.due_of keeps its position
        return due + self.gap_after(occurrence)

    def due_of(self, first_due: EpochMs, occurrence: int) -> EpochMs:
        """Due time of ``occurrence`` (1-based)."""
        if self.kind is RepeatKind.FIXED:
            return first_due + (occurrence - 1) * self.interval_ms
        if self.kind is RepeatKind.CRON:
            return cron.due_of(self.cron, self.zone, first_due, occurrence)
        due = first_due
        for k in range(1, occurrence):
            due += self.gap_after(k)
        return due

    def latest_due(self, first_due: EpochMs, occurrence: int, now: EpochMs) -> tuple[int, EpochMs]:
        """The last occurrence, from ``occurrence`` on, that is due at or before ``now``.

        Overdue occurrences collapse into this one (documented behaviour): a repeat far in the
        past delivers once, then resumes its schedule, instead of flooding its topic.
        """
        due = self.due_of(first_due, occurrence)
        if self.kind is RepeatKind.FIXED:
            if now <= due:
                return occurrence, due
            steps = min((now - due) // self.interval_ms, self.times - occurrence)
            return occurrence + steps, due + steps * self.interval_ms
        if self.kind is RepeatKind.CRON:  # counted: a repeat far behind costs no more
            if now <= due or occurrence >= self.times:
                return occurrence, due
            left = self.last_occurrence(first_due) - occurrence
            steps = cron.fires_between(self.cron, self.zone, due, now, left)
            if steps <= 0:
                return occurrence, due
            return occurrence + steps, self.due_of(first_due, occurrence + steps)
        while not self.is_last(first_due, occurrence):
            nxt = self.next_due(first_due, occurrence, due)
            if nxt > now:
                break
            occurrence, due = occurrence + 1, nxt
        return occurrence, due

    def due_now(
        self, first_due: EpochMs, occurrence: int, now: EpochMs, window_ms: int
    ) -> tuple[int, EpochMs]:
        """The occurrence, from ``occurrence`` on, to deliver at ``now`` under ``catch_up``.

        ``LATEST``: ``latest_due``. ``ALL``: ``occurrence`` itself when it is overdue by at most
        ``window_ms``; otherwise the latest one overdue by more, standing for all those (the
        ones inside the window follow as follow-ups, each once).
        """
        if self.catch_up is CatchUp.LATEST:
            return self.latest_due(first_due, occurrence, now)
        return self.latest_due(first_due, occurrence, now - window_ms - 1)

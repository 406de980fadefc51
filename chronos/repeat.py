"""Repeat schedules: fixed interval N times, or exponential backoff capped at a maximum gap.

Occurrences are numbered from 1; occurrence 1 is due at the message's first due time.
A fixed repeat is due at ``first + (k-1)*interval``. An exponential repeat waits
``min(interval * multiplier**(k-1), max_interval)`` between occurrence k and k+1, so
DDMQ Chronos' ``interval^k`` seconds is ``interval_ms=interval*1000, multiplier=interval``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class Repeat:
    """A repeat schedule.

    Parameters:
        kind: fixed or exponential spacing.
        interval_ms: the (first) gap between occurrences.
        times: total number of occurrences, the first one included.
        multiplier: growth factor of the gap (exponential only; 1 for fixed).
        max_interval_ms: cap of the gap (exponential only).
        catch_up: what happens to overdue occurrences (see ``CatchUp``).
    """

    kind: RepeatKind
    interval_ms: int
    times: int
    multiplier: int = 1
    max_interval_ms: int = 0
    catch_up: CatchUp = CatchUp.ALL

    def gap_after(self, occurrence: int) -> int:
        """Milliseconds between ``occurrence`` and the next one."""
        if self.kind is RepeatKind.FIXED:
            return self.interval_ms
        # Stop multiplying once the cap is reached, so huge exponents never build huge ints.
        gap = self.interval_ms
        for _ in range(occurrence - 1):
            if gap >= self.max_interval_ms:
                break
            gap *= self.multiplier
        return min(gap, self.max_interval_ms)

    def due_of(self, first_due: EpochMs, occurrence: int) -> EpochMs:
        """Due time of ``occurrence`` (1-based)."""
        if self.kind is RepeatKind.FIXED:
            return first_due + (occurrence - 1) * self.interval_ms
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
        while occurrence < self.times:
            nxt = due + self.gap_after(occurrence)
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

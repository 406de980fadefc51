"""Calendar schedules: a cron expression read in an IANA time zone.

``croniter`` finds the next wall-clock time an expression matches; this module turns wall-clock
times into instants, which is where daylight-saving time bites. The rules (documented in the
docs/guarantees.md and checked against a brute-force walk in ``tests/unit/test_cron.py``):

- a local time that does not exist (the hour skipped when clocks go forward) fires at the next
  valid instant, the moment the clocks jumped (02:30 on the spring-forward night in Berlin
  fires at 03:00 CEST); several skipped matches fire once there, together with a match at
  that instant itself;
- a local time that exists twice (the hour repeated when clocks go back) fires once, at its
  first instant; the repeated hour's second pass fires nothing;
- every other match fires at its instant.

So "0 9 * * 1-5" in Europe/Berlin is 09:00 local all year, and a fixed 24 h interval, which
drifts by an hour at each change, is no longer the only way to say "daily".

Expressions have 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first
(as Quartz and Spring write them). Day-of-month and day-of-week, both restricted, match when
either does (Vixie cron).
"""

from __future__ import annotations

import functools
import re
import threading
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from chronos.types import EpochMs

#: The shape of an expression: 5 or 6 fields of printable ASCII, separated by spaces (the
#: proxy's OpenAPI schema states the same pattern).
EXPRESSION_SHAPE = r"^ *[!-~]+( +[!-~]+){4,5} *$"
_SHAPE = re.compile(EXPRESSION_SHAPE)


class CronError(ValueError):
    """An expression or zone chronos cannot read; the message says which and why."""


def _instant_ms(moment: datetime) -> EpochMs:
    return int(moment.timestamp() * 1000)


class CronSchedule:
    """One expression in one zone: instants of its fires after a given instant."""

    def __init__(self, expression: str, zone: str) -> None:
        if not _SHAPE.match(expression):
            raise CronError(
                f"{expression!r} is not a cron expression: give 5 fields (minute hour day "
                "month weekday) or 6 (seconds first), separated by spaces"
            )
        fields = expression.split()
        self.expression = " ".join(fields)
        self.has_seconds = len(fields) == 6
        try:
            self._zone = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
            # ZoneInfo reads a file the input names: a folder ("Europe"), a name too long for
            # the file system or a NUL each fail in their own way (IsADirectoryError, OSError,
            # ValueError); the OSErrors were a 500 with a traceback (issue 62). Not checked
            # against a list of names: what an earlier release accepted and stored (a
            # "posixrules", a "right/UTC") must still load.
            shown = zone if len(zone) <= 64 else zone[:64] + "..."
            raise CronError(f"{shown!r} is not an IANA time zone (like Europe/Berlin)") from exc
        self.zone = zone
        # Imported here: croniter costs ~85 ms at import, which every process that imports
        # chronos.repeat (the CLI's --help, the proxy, decoder children) would pay without a
        # single cron repeat. Its errors are ValueErrors.
        from croniter import croniter

        try:
            # Parsed once; each search moves it (set_current is a fifth of a new parse).
            self._matches = croniter(
                self.expression, datetime(2000, 1, 1), second_at_beginning=self.has_seconds
            )
        except (ValueError, KeyError) as exc:
            raise CronError(f"{expression!r} is not a cron expression: {exc}") from exc
        try:
            self._matches.get_next(datetime)
        except ValueError as exc:  # February 30th, say
            raise CronError(f"{expression!r} never matches a date") from exc
        self._lock = threading.Lock()

    def next_after(self, instant_ms: EpochMs) -> EpochMs:
        """The first fire strictly after ``instant_ms``; CronError when there is none before
        the year 9999 (datetime's end)."""
        try:
            return self._next_after(instant_ms)
        except (OverflowError, ValueError, OSError) as exc:
            raise CronError(f"no fire of {self.expression!r} after {instant_ms} ms") from exc

    def _next_after(self, instant_ms: EpochMs) -> EpochMs:
        local = datetime.fromtimestamp(instant_ms / 1000, self._zone).replace(tzinfo=None)
        with self._lock:
            self._matches.set_current(local, force=True)
            while True:  # ends: every expression matches some date (checked when parsed)
                # A start inside a repeated hour's second pass sees matches whose first
                # instant is already behind it: those fired in the first pass.
                fire = self._instant(self._matches.get_next(datetime))
                if fire > instant_ms:
                    return fire

    def at_or_after(self, instant_ms: EpochMs) -> EpochMs:
        """The first fire at or after ``instant_ms``: a cron repeat's first occurrence."""
        return self.next_after(instant_ms - 1)

    def _instant(self, wall: datetime) -> EpochMs:
        """The instant a matching wall-clock time fires at (the module's rules)."""
        first = wall.replace(tzinfo=self._zone)  # fold 0: the earlier of a repeated time
        instant = first.astimezone(UTC)
        if instant.astimezone(self._zone).replace(tzinfo=None) == wall:
            return _instant_ms(instant)
        return self._gap_end(wall)

    def _gap_end(self, wall: datetime) -> EpochMs:
        """The instant the clocks jumped over ``wall``: between its two readings (offset
        before and after the jump), the first second whose local time is past ``wall``."""
        readings = (
            int(wall.replace(tzinfo=self._zone, fold=0).timestamp()),
            int(wall.replace(tzinfo=self._zone, fold=1).timestamp()),
        )
        low, high = min(readings), max(readings)
        while low < high:
            middle = (low + high) // 2
            if datetime.fromtimestamp(middle, self._zone).replace(tzinfo=None) > wall:
                high = middle
            else:
                low = middle + 1
        return low * 1000


@functools.lru_cache(maxsize=256)
def schedule_of(expression: str, zone: str) -> CronSchedule:
    """Parsed once per expression and zone: messages of one schedule share it."""
    return CronSchedule(expression, zone)


class _Walk:
    """How far the fires of one schedule from one first due have been counted."""

    def __init__(self, first_ms: EpochMs) -> None:
        self.lock = threading.Lock()
        self.occurrence = 1
        self.due_ms = first_ms


@functools.lru_cache(maxsize=4096)
def _walk(expression: str, zone: str, first_ms: EpochMs) -> _Walk:
    return _Walk(first_ms)


def due_of(expression: str, zone: str, first_ms: EpochMs, occurrence: int) -> EpochMs:
    """Due time of ``occurrence`` (1-based) of a cron repeat whose first fire is ``first_ms``.

    Occurrence k is k-1 fires after the first; counting from the first is O(k), so the last
    position counted is kept per message: delivering occurrence k, then scheduling k+1,
    costs one step each.
    """
    if occurrence == 1:
        return first_ms
    schedule = schedule_of(expression, zone)
    walk = _walk(expression, zone, first_ms)
    with walk.lock:
        if walk.occurrence > occurrence:
            walk.occurrence, walk.due_ms = 1, first_ms
        while walk.occurrence < occurrence:
            walk.due_ms = schedule.next_after(walk.due_ms)
            walk.occurrence += 1
        return walk.due_ms

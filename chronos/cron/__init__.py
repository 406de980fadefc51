"""Calendar schedules: a cron expression read in an IANA time zone.

An expression names wall-clock times; this package turns them into instants, which is where
daylight-saving time bites. Its modules: ``grammar`` (the documented grammar, Vixie's),
``legacy`` (stored expressions outside it, read as croniter read them), ``days`` (day
arithmetic, the times of day an expression names), ``zones`` (a zone's offset changes per
year) and ``schedule`` (``CronSchedule``: fires counted from those tables). The rules
(documented in docs/guarantees.md and checked against a brute-force walk in
``tests/unit/test_cron.py``):

- a local time that does not exist (the hour skipped when clocks go forward) fires at the next
  valid instant, the moment the clocks jumped (02:30 on the spring-forward night in Berlin
  fires at 03:00 CEST); several skipped matches fire once there, together with a match at
  that instant itself;
- a local time that exists twice (the hour repeated when clocks go back) fires once, at its
  first instant; the repeated hour's second pass fires nothing;
- every other match fires at its instant.

So "0 9 * * 1-5" in Europe/Berlin is 09:00 local all year, and a fixed 24 h interval, which
drifts by an hour at each change, is no longer the only way to say "daily".

**The grammar (issue 63)** is Vixie cron's, listed in docs/guarantees.md and read here
(``_vixie``), not by croniter: 5 fields (minute hour day-of-month month day-of-week), or 6 with
a seconds field first; day-of-week 0-7, 0 and 7 Sunday (Vixie's numbering, not Quartz's). A
day field starting with ``*`` leaves the day to the other: when either starts with ``*`` a day
must match both, when neither does, either (so ``0 12 */10 * 1`` is the 1st, 11th, 21st or
31st when it is a Monday). Beyond Vixie: ``L`` and ``nW`` in day-of-month, ``d#n`` in
day-of-week, ``v/step``, names in ranges. Refused, with the field and why: ``R`` and ``H`` (a
value each process draws), Quartz's ``?``, ``L`` in day-of-week, ranges that wrap or name one
value, ``*`` in a list, ``W`` or ``#`` beside a restricted other day field, a step of 0 or
wider than its field: what has no one meaning, or one croniter read otherwise than Vixie.

An expression outside the grammar that an earlier release accepted, and so may have stored,
still loads, read as it read it (croniter; ``R`` and ``H`` pinned to a hash of the
expression): ``CronSchedule.refused`` says why a new request may not use it
(``validation.first_due_for``). Inside the grammar, earlier releases read one kind
differently: a day field starting with ``*`` other than ``*`` itself (``*/10``) beside a
restricted other fired when either matched; it now fires by Vixie's rule, stored ones too,
since the expression is all that every reader of a repeat (the node's store, the inner topic,
the pipeline) has to go by (docs/guarantees.md).

**Counted, not walked (issue 62).** A repeat's occurrence k, the count of its fires in a span
and the first fire after an instant cost a few bisections, whatever k: walking the fires one
croniter step at a time cost a validation 10,000 steps for an every-second repeat of 10,000
occurrences, in the proxy and again in every node's ingest. The fires of an expression are
its matching days times the same set T of times of day (its hour, minute and second fields),
so up to a wall-clock time they are counted as (matching days before it) x |T| plus the times
of its own day (``_TimesOfDay``, ``_VixieDays`` or ``_DaySpec``, one table of matching days
per year). Wall clock to instant is linear between two changes of the zone's offset
(``_ZoneYear``, one table per zone and year); a change forward collapses the wall times it
skips, with the one it jumps to, into one fire (their count is known, so is the collapse); a
change back fires its repeated wall times once (the earlier instant), so it collapses
nothing. The walk (``walk_next_after``: one wall time of the day tables at a time, or
croniter's steps for an expression read as before) is the fallback for a zone year whose
offset changes come too close together for the table to be sure of them (none in tzdata
since 1970).

**The minimum gap** (``min_gap_ms``) is read on the wall clock: the shortest distance between
two consecutive times of day in T, and from the last to the next day's first as if the next
day matched too. A night the clocks go forward can bring two fires closer than that, by up to
the length of the jump (``0 1,3 * * *`` in Berlin fires 1 h apart that night: 02:00 does not
exist, so 03:00 is an hour after 01:00); fires are whole seconds and a skipped stretch fires
once, so no two fires are ever under 1 s apart.
"""

from __future__ import annotations

from chronos.cron.errors import CronError
from chronos.cron.grammar import EXPRESSION_SHAPE
from chronos.cron.schedule import (
    CronSchedule,
    clear_caches,
    due_of,
    fires_between,
    schedule_of,
)

__all__ = [
    "EXPRESSION_SHAPE",
    "CronError",
    "CronSchedule",
    "clear_caches",
    "due_of",
    "fires_between",
    "schedule_of",
]

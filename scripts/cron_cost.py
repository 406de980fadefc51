#!/usr/bin/env python3
"""What accepting a cron repeat costs (issue 62): ``first_due_for`` and ``validate_message``,
as the proxy and the node's ingest run them, per message, without Kafka.

    python scripts/cron_cost.py [--messages N] [--json]

Each case is measured cold (every cache of ``chronos.cron`` emptied before each message: a
node that just started), as a new expression (the caches emptied but for the zones' tables:
an expression the node never saw, in a zone it did) and warm (the same message again).
Reported per case: microseconds per message (median and max), and croniter steps per message
(calls of ``croniter.get_next``: what the old validation walked, one per occurrence).

Cases:

* ``every_second``: ``* * * * * *`` in Europe/Berlin, ``times`` 10,000 (issue 62's example);
* ``daily``: ``0 9 * * *`` in Europe/Berlin, ``times`` 365;
* ``distinct``: a different expression per message (a daily fire at a second of its own),
  ``times`` 365;
* ``attacker_days``: a different set of days of the month per message, so each needs day
  tables of its own for every year it spans (hourly, ``times`` 3,000, most of a year ahead);
* ``attacker_zones``: the daily case in a different zone per message (each needs the zone's
  offset changes for the years it spans);
* ``attacker_sparse``: a different expression per message that matches once in 28 years
  (a Monday February 29th), so its first fire is years of day tables away (refused: past the
  horizon, at the cost of finding it);
* ``attacker_past``: daily, ``times`` 10,000, due in 1971 (a ``deliver_at`` in the past is
  allowed: the repeat starts at its first fire after it), in a different zone per message:
  27 years of a zone's offset changes to read, where a zone's table is not built yet;
* ``attacker_worst``: the same with an expression of its own firing once a year: every
  year from 1971 to the horizon is counted (refused: its 10,000th is past the horizon);
* ``fall_back_start``: every-second, ``times`` 10,000, starting inside the hour Berlin
  repeats when its clocks go back (the old first-due search walked that hour).

Runs against whatever ``chronos`` is on the path: before and after a change, the same numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import zoneinfo
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from croniter import croniter  # noqa: E402

from chronos import cron  # noqa: E402
from chronos.model import DelayMessage  # noqa: E402
from chronos.names import TopicNames  # noqa: E402
from chronos.repeat import Repeat  # noqa: E402
from chronos.settings import LimitSettings  # noqa: E402
from chronos.validation import first_due_for, validate_message  # noqa: E402

LIMITS = LimitSettings()
NAMES = TopicNames("chronos")
#: A fixed "now": a Berlin spring-forward night falls inside the every-second case's span.
NOW = int(datetime.fromisoformat("2027-03-28T00:30:00+01:00").timestamp() * 1000)
PAST = int(datetime.fromisoformat("1971-01-01T00:00:00+00:00").timestamp() * 1000)
FALL_BACK = int(datetime.fromisoformat("2027-10-31T02:20:00+01:00").timestamp() * 1000)

_steps = 0
_get_next = croniter.get_next


def _counting_get_next(self: croniter, *args: object, **kwargs: object) -> object:
    global _steps
    _steps += 1
    return _get_next(self, *args, **kwargs)


croniter.get_next = _counting_get_next


def clear_caches(zones: bool) -> None:
    """The caches of ``chronos.cron``, whichever version of it runs: with ``zones``, the
    zones' tables too (a version without them has nothing more to clear)."""
    clear = getattr(cron, "clear_caches", None)
    if clear is not None:
        clear(zones=zones)
        return
    for name in ("schedule_of", "_walk"):
        function = getattr(cron, name, None)
        if function is not None:
            function.cache_clear()


def message(index: int, expression: str, zone: str, times: int, start: int) -> DelayMessage:
    repeat = Repeat.calendar(expression, zone, times=times)
    return DelayMessage(
        id=f"m{index}",
        topic="t",
        key=None,
        value=b"v",
        first_due_ms=start,
        repeat=repeat,
    )


def accept(msg: DelayMessage, now: int) -> None:
    """What the proxy and the node do with a request: its first fire, then the rules."""
    assert msg.repeat is not None
    msg.first_due_ms = first_due_for(msg.repeat, msg.first_due_ms)
    validate_message(msg, LIMITS, NAMES, now)


def _days(index: int) -> str:
    days = [str(day) for day in range(1, 29) if not (index >> (day - 1)) & 1]
    return ",".join(days) or "1"


def cases(count: int) -> dict[str, Callable[[int], tuple[DelayMessage, int]]]:
    zones = sorted(zoneinfo.available_timezones())
    hour = 3_600_000
    return {
        "every_second": lambda i: (
            message(i, "* * * * * *", "Europe/Berlin", 10_000, NOW + i * 1000),
            NOW,
        ),
        "daily": lambda i: (message(i, "0 9 * * *", "Europe/Berlin", 365, NOW + i), NOW),
        "distinct": lambda i: (
            message(i, f"{i % 60} {i // 60 % 60} 9 * * *", "Europe/Berlin", 365, NOW),
            NOW,
        ),
        "attacker_days": lambda i: (
            message(i, f"0 0 * {_days(i + 1)} * *", "Europe/Berlin", 3_000, NOW + hour),
            NOW,
        ),
        "attacker_zones": lambda i: (
            message(i, "0 9 * * *", zones[i * 7 % len(zones)], 365, NOW),
            NOW,
        ),
        "attacker_sparse": lambda i: (
            message(i, f"{i % 60} {i // 60 % 60} 0 29 2 1#5", "Europe/Berlin", 2, NOW),
            NOW,
        ),
        "attacker_past": lambda i: (
            message(i, "0 9 * * *", zones[i * 7 % len(zones)], 10_000, PAST + i),
            NOW,
        ),
        "attacker_worst": lambda i: (
            message(i, f"{i % 60} 0 1 1 *", zones[i * 7 % len(zones)], 10_000, PAST + i),
            NOW,
        ),
        "fall_back_start": lambda i: (
            message(i, "* * * * * *", "Europe/Berlin", 10_000, FALL_BACK + i),
            FALL_BACK,
        ),
    }


#: cold: every cache emptied (a node just started); new_expression: the zones' tables kept (an
#: expression the node never saw, in a zone it did); warm: the same message once more.
MODES = ("cold", "new_expression", "warm")


def measure(
    build: Callable[[int], tuple[DelayMessage, int]], count: int, mode: str
) -> Iterator[tuple[float, int]]:
    global _steps
    for index in range(count):
        msg, now = build(index)
        try:
            accept(build(index)[0], now)  # fills the caches
        except Exception:  # a refused message fills them as far as it got
            pass
        if mode != "warm":
            clear_caches(zones=mode == "cold")
        _steps = 0
        started = time.perf_counter()
        try:
            accept(msg, now)
        except Exception as exc:  # a refusal costs what it costs; say which, once
            if index == 0 and mode == "cold":
                print(f"  {type(exc).__name__}: {exc}", file=sys.stderr)
        yield (time.perf_counter() - started) * 1e6, _steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20, help="messages per case (20)")
    parser.add_argument(
        "--slow-messages",
        type=int,
        default=3,
        help="messages for a case whose first message took over 0.5 s (3)",
    )
    parser.add_argument("--only", nargs="*", help="these cases only")
    parser.add_argument("--json", action="store_true", help="one JSON object, nothing else")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for name, build in cases(args.messages).items():
        if args.only and name not in args.only:
            continue
        row: dict[str, float] = {}
        for mode in MODES:
            samples: list[tuple[float, int]] = []
            for sample in measure(build, args.messages, mode):
                samples.append(sample)
                if len(samples) >= args.slow_messages and samples[0][0] > 500_000:
                    break
            micros = [s[0] for s in samples]
            row[f"{mode}_us_median"] = round(statistics.median(micros), 1)
            row[f"{mode}_us_max"] = round(max(micros), 1)
            row[f"{mode}_croniter_steps"] = max(s[1] for s in samples)
            row[f"{mode}_messages"] = len(samples)
        results[name] = row
        if not args.json:
            print(f"{name:16} " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

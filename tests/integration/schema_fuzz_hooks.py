"""schemathesis hooks of the schema fuzz (tests/integration/test_schema_fuzz.py), loaded by
``st`` through ``SCHEMATHESIS_HOOKS``.

Two refusals of schema-valid requests are the server's rules that the schema does not state
(proxy/http/openapi_rules.py says which and why), so the generator produces requests that break
them:

* a due time (or a repeat's last occurrence) more than ``limits.max_delay_s`` ahead: a rule of
  the clock (``"deliver_at": "9270-10-11T..."``);
* rules of two fields at once: a value, key or header value that is not base64 under
  ``"encoding": "base64"``; a repeat's ``max_interval_ms`` below its ``interval_ms``;
* a cron repeat's grammar beyond its shape (fields out of range, a date that never comes, an
  unknown time zone, fires closer than ``limits.repeat_min_interval_ms``, ``until_ms`` before
  the first fire).

Only those refusals are dropped, by their 422 and their message; every other rejected valid
request still fails the run. Each dropped one is written to the file ``CHRONOS_TEST_FUZZ_DROPPED``
names, for the test to count.

A cron repeat's ``zone`` and ``cron`` are drawn, beside the generator's own strings, from
``_ZONES`` and ``_CRONS`` (issue 62: a zone naming a folder was a 500): names of folders, links,
files of the zone database that are no zone, long names, NUL, ``..``; expressions of every
syntax the documented grammar takes or refuses (docs/guarantees.md, issue 63: ``R``, ``H``,
``?``, wrapping ranges and the rest are a 422 saying "is not a cron expression"). Only a
string is replaced, and an expression only by another of the schema's shape, so a case the
generator made invalid stays invalid.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from typing import Any

import schemathesis
from hypothesis import strategies as st

from chronos.cron import EXPRESSION_SHAPE

#: Zones a user, a typo or an attacker may name: folders, links, files of the database that
#: are not zones, paths out of it, NUL, long names; and real zones of every kind of rule.
_ZONES = (
    "Europe", "Etc", "America/Argentina", "America", "A" * 300, "Europe/" + "B" * 255,
    "Europe/Berlin\x00", "../../../../etc/passwd", "..", ".", "/", "/etc/localtime",
    "Europe/../Europe/Berlin", "Europe//Berlin", "Europe/Berlin/", "europe/berlin",
    "posixrules", "right/UTC", "posix/Europe/Berlin", "localtime", "Factory", "zone.tab",
    "tzdata.zi", "leapseconds", "iso3166.tab", "__init__.py", "", " ", "UTC", "Etc/GMT+14",
    "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran", "Pacific/Apia",
)  # fmt: skip
#: Expressions of the schema's shape in every syntax the grammar takes or refuses.
_CRONS = (
    "* * * * * *", "0 12 */10 * 1", "0 9 * * 1-5", "R R * * *", "H H * * *", "0 0 L * *",
    "0 0 ? * 5#3", "0 0 * * 5L", "0 0 30 2 *", "0 0 31 4 *", "60 * * * *", "*/0 * * * *",
    "5-1 * * * *", "0 9 * * mon-fri", "0 0 1 jan *", "0 0 1W * *",
    "59 59 23 31 12 *", "0 0 29 2 *", "*/7 */5 */3 */2 */4", "0-59/61 * * * *",
    ",".join(str(m) for m in range(60)) + " * * * *",
    "0 0 9 ? * 2-6", "0 0 * * L5", "0 0 1-1 * *", "0 0 15W * 1", "0 0 * * 1#1,5#3",
    "0 0 1 * 5#3", "0 0 * * 7", "5/15 * * * *", "0 0 * * 1/2", "0 0 1,* * *",
)  # fmt: skip
_SHAPE = re.compile(EXPRESSION_SHAPE)
#: Whose turn it is in ``flatmap_body``.
_TURNS = itertools.count()


def _cron_repeats(body: Any) -> list[dict[str, Any]]:
    """The repeat objects of a schedule body (one message, or a batch's)."""
    if not isinstance(body, dict):
        return []
    messages = body.get("messages") if "messages" in body else [body]
    if not isinstance(messages, list):
        return []
    return [
        m["repeat"] for m in messages if isinstance(m, dict) and isinstance(m.get("repeat"), dict)
    ]


def _with(body: Any, zone: str | None, expression: str | None) -> Any:
    """A copy of ``body`` whose string zones (and shaped expressions) are the ones drawn."""
    copy: Any = json.loads(json.dumps(body))
    drawn = []
    for repeat in _cron_repeats(copy):
        if zone is not None and isinstance(repeat.get("zone"), str):
            repeat["zone"] = zone
            drawn.append(f"zone {zone!r}")
        cron = repeat.get("cron")
        if expression is not None and isinstance(cron, str) and _SHAPE.match(cron):
            repeat["cron"] = expression
            drawn.append(f"cron {expression!r}")
    told = os.environ.get("CHRONOS_TEST_FUZZ_CRON")
    if told and drawn:
        with open(told, "a", encoding="utf-8") as out:
            out.writelines(f"{line}\n" for line in drawn)
    return copy


@schemathesis.hook
def flatmap_body(context: Any, body: Any) -> Any:
    """Three cron bodies in four get the next zone and expression of the lists above, in
    turn (drawn at random, hypothesis favours a list's first items: a CI run drew 9 zones of
    35); the fourth keeps the generator's own strings."""
    turn = next(_TURNS)
    if not _cron_repeats(body) or turn % 4 == 3:
        return st.just(body)
    return st.just(_with(body, _ZONES[turn % len(_ZONES)], _CRONS[turn % len(_CRONS)]))


#: "more than 31536000 s ahead", "last occurrence is more than ...", "is not valid base64",
#: "must be between interval_ms and 86400000 ms", then the cron rules (``chronos/cron/``,
#: ``chronos/validation.py``).
_UNSTATED_RULES = (
    "s ahead",
    "is not valid base64",
    "must be between interval_ms and",
    "is not a cron expression",
    "never matches a date",
    "is not an IANA time zone",
    "ms apart, less than",
    "is before the first occurrence",
)


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """False (dropped) only for a valid request refused by a rule the schema does not state."""
    if getattr(failure, "code", None) != "ST202" or response.status_code != 422:
        return True
    try:
        error = str(response.json().get("error", ""))
    except ValueError:
        return True
    if not any(rule in error for rule in _UNSTATED_RULES):
        return True
    dropped = os.environ.get("CHRONOS_TEST_FUZZ_DROPPED")
    if dropped:
        with open(dropped, "a", encoding="utf-8") as out:
            out.write(f"{case.operation.label}: {error}\n")
    return False

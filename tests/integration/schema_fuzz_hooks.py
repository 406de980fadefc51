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
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis

#: "more than 31536000 s ahead", "last occurrence is more than ...", "is not valid base64",
#: "must be between interval_ms and 86400000 ms", then the cron rules (``chronos/cron.py``,
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

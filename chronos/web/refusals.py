"""What an HTTP surface refused, for its operators: counted (``/metrics``) and logged.

Every refusal of a caller (401, 403, 408, 413, 429 from the guard; 403 for a topic and 429 for
a quota from the proxy) is one ``request_refused`` line naming the token (its name, never the
secret), the reason, the operation and the client. A flood of them (a scanner, a client with a
revoked token) is written once per ``window_s`` per (status, reason, token) with how many were
held back (``repeated``), so the log stays readable and bounded.
"""

from __future__ import annotations

import threading
from collections import Counter

import structlog

from chronos.logs import REPEAT_WINDOW_S, Throttle

log = structlog.get_logger(__name__)


class Refusals:
    """Counts and logs the refusals of one surface (the proxy, a node's admin API).

    Parameters:
        surface: named in every line (``proxy``, ``admin``).
        window_s: how long repeats of one kind of refusal are held back.
    """

    def __init__(self, surface: str, window_s: float = REPEAT_WINDOW_S) -> None:
        self._surface = surface
        self._lock = threading.Lock()
        self._counts: Counter[tuple[int, str]] = Counter()
        self._throttle = Throttle(window_s)

    def refused(
        self,
        status: int,
        reason: str,
        *,
        token: str | None,
        operation: str | None,
        client: str | None,
        detail: str,
    ) -> None:
        """Count one refusal, and log it unless its kind was logged within the window."""
        with self._lock:
            self._counts[(status, reason)] += 1
        held = self._throttle.admit((status, reason, token))
        if held is None:
            return
        log.warning(
            "request_refused",
            surface=self._surface,
            status=status,
            reason=reason,
            token=token,
            operation=operation,
            client=client,
            detail=detail,
            **({"repeated": held} if held else {}),
        )

    def counts(self) -> dict[tuple[int, str], int]:
        """Refusals so far by (status, reason)."""
        with self._lock:
            return dict(self._counts)

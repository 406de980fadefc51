"""A token bucket: a rate, with bursts of what was saved while idle.

chronos limits rates with it in two places: deliveries to a rate-limited topic
(``delivery/pacing.py``) and the requests and messages of an HTTP token (``web/guard.py``).
A group's master plans a topic's rate differently, as later slots for what falls due too fast
(``delivery/rate_plan.py``): it must decide where a message goes before it is due, not whether
it may go now.
"""

from __future__ import annotations

#: A token short by less than this counts as whole: elapsed seconds times the rate is not exact
#: in binary (0.1 s at 10/s makes 0.99999999999994).
_SHORT = 1e-9


class TokenBucket:
    """``rate`` tokens a second (more than 0), at most ``burst`` saved; starts full.

    Times are seconds of a monotonic clock, passed in by the caller (so tests move them). Not
    thread-safe: its owner holds a lock around it.
    """

    def __init__(self, rate: float, burst: float, now_s: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._updated = now_s

    def _refill(self, now_s: float) -> None:
        if now_s > self._updated:
            self._tokens = min(self.burst, self._tokens + (now_s - self._updated) * self.rate)
            self._updated = now_s

    def take(self, now_s: float, cost: float = 1.0) -> bool:
        """Spend ``cost`` tokens if they are there."""
        self._refill(now_s)
        if self._tokens >= cost - _SHORT:
            self._tokens -= cost
            return True
        return False

    def wait_s(self, now_s: float, cost: float = 1.0) -> float:
        """How long until ``cost`` tokens are there. A cost over ``burst`` never is: the
        caller refuses it rather than asking (the answer would be a finite lie)."""
        self._refill(now_s)
        return 0.0 if self._tokens >= cost - _SHORT else (cost - self._tokens) / self.rate

    def set_rate(self, rate: float, burst: float, now_s: float) -> None:
        """Go on at ``rate`` and ``burst`` from ``now_s``, keeping what was saved by then up to
        the new burst: a changed rate is no reason to let a burst out."""
        self._refill(now_s)
        self.rate, self.burst = rate, burst
        self._tokens = min(self._tokens, burst)

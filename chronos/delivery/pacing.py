"""Rates per target topic: messages that fall due faster than their topic's ``rate`` wait here,
in the order they came (due order), and go out as its token bucket refills.

A node alone's senders share one :class:`Pacing`. A held message is dispatched and not yet
acknowledged, so the seek waits at the first of them (a restart delivers again what followed
it, as for any message in flight) and it counts toward ``node.max_in_flight``: a backlog past
that holds back the push worker, and with it the other topics.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from chronos.delivery.job import DeliveryJob
from chronos.delivery.policies import Policies
from chronos.metrics import Metrics, NullMetrics
from chronos.token_bucket import TokenBucket
from chronos.types import EpochMs

#: The histogram of a limited topic's lateness as its messages go out: ``<this>:<topic>``
#: (``/metrics``: ``chronos_topic_lateness_seconds{topic=...}``).
TOPIC_LATENESS = "topic_lateness_ms"


class Pacing:
    """Holds jobs of rate-limited topics until their bucket lets them out; shared by senders.

    A rate set or changed live takes effect at the next job of its topic (a bucket of the same
    rate and burst keeps its tokens); one cleared lets its held jobs go.

    Parameters:
        policies: each topic's policy now (its ``rate`` and ``burst``).
        metrics: where each limited topic's lateness goes (:data:`TOPIC_LATENESS`).
        monotonic: seconds of a monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        policies: Policies,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._policies = policies
        self._version = policies.version
        self._metrics = metrics or NullMetrics()
        self._now = monotonic
        self._lock = threading.Lock()
        #: Each topic's bucket, None for a topic without a rate (asked once per topic).
        self._buckets: dict[str, TokenBucket | None] = {}
        #: Jobs waiting for a token, by topic, in the order they came.
        self._held: dict[str, deque[DeliveryJob]] = {}
        self._count = 0

    @property
    def active(self) -> bool:
        """Whether any topic has a rate or any job waits (else senders need not ask)."""
        return self._policies.any_rate or self._count > 0

    def _bucket(self, topic: str) -> TokenBucket | None:
        if self._version != self._policies.version:
            self._refresh()
        if topic in self._buckets:
            return self._buckets[topic]
        bucket = self._new_bucket(topic, None)
        self._buckets[topic] = bucket
        return bucket

    def _new_bucket(self, topic: str, old: TokenBucket | None) -> TokenBucket | None:
        rate = self._policies.rate_of(topic)  # this node's share of it
        if rate is None:
            return None
        if old is not None and (old.rate, old.burst) == (rate.per_s, rate.burst):
            return old
        return TokenBucket(rate.per_s, rate.burst, self._now())

    def _refresh(self) -> None:
        """The policies changed: each known topic's bucket again."""
        self._version = self._policies.version
        self._buckets = {t: self._new_bucket(t, b) for t, b in self._buckets.items()}

    def admit(self, job: DeliveryJob, topic: str, now_ms: EpochMs) -> bool:
        """True to send ``job`` now; False when it waits (behind its topic's earlier ones)."""
        with self._lock:
            bucket = self._bucket(topic)
            if bucket is None:
                return True
            waiting = self._held.get(topic)
            if waiting is None:
                if bucket.take(self._now()):
                    self._observe(topic, job, now_ms)
                    return True
                waiting = self._held[topic] = deque()
            waiting.append(job)
            self._count += 1
            return False

    def _observe(self, topic: str, job: DeliveryJob, now_ms: EpochMs) -> None:
        self._metrics.observe(f"{TOPIC_LATENESS}:{topic}", now_ms - job.lateness_base_ms)

    def release(self, now_ms: EpochMs) -> list[DeliveryJob]:
        """Held jobs whose tokens have come, each topic's in the order they came."""
        if not self._count:
            return []
        released: list[DeliveryJob] = []
        with self._lock:
            now = self._now()
            for topic in list(self._held):
                waiting = self._held[topic]
                bucket = self._bucket(topic)
                while waiting and (bucket is None or bucket.take(now)):
                    job = waiting.popleft()
                    self._observe(topic, job, now_ms)
                    released.append(job)
                if not waiting:
                    del self._held[topic]
            self._count -= len(released)
        return released

    def next_release_s(self) -> float | None:
        """Seconds until a held job may go; None when none is held."""
        if not self._count:
            return None
        with self._lock:
            now = self._now()
            buckets = [self._bucket(topic) for topic in self._held]
            return min((0.0 if b is None else b.wait_s(now) for b in buckets), default=None)

    def held(self) -> int:
        """How many jobs wait."""
        return self._count

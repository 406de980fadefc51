"""Where many partitions end, asked in one ListOffsets for every replica of a process.

Why: a cluster node runs a replica per hosted partition, and each asks Kafka where its
partitions end, again and again: its cancel gate (``node/watermark.py``, every 50 ms while
quiet) and its master watch (``group/master_watch.py``, about ten times a second). With eight
replicas that was ~250 ListOffsets a second per node; on an idle 3-node cluster with 8
partitions those questions were most of the broker's CPU (92 % -> 42 % with fewer). Here every
replica's question is answered from one request covering all of them, at most ``max_age_s``
old: the broker sees one question per interval per node, whatever it hosts.

A question not asked again for ``_FORGET_AFTER_S`` is dropped (a replica that stopped).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # not re-exported explicitly

#: A partition not asked about for this long is no longer asked for.
_FORGET_AFTER_S = 10.0

Key = tuple[str, int]
#: A question about some partitions' ends: each call answers it (raises without an answer).
Ends = Callable[[], dict[int, int]]
#: (topic, partitions, committed) -> a question about their ends, asked again and again.
EndsFor = Callable[[str, list[int], bool], Ends]


class SharedEnds:
    """Answers ``asker(topic, partitions)()`` for every replica of a process from one request.

    Parameters:
        open_admin: builds an admin client (a new one after a failure, as ``StableEnds``).
        timeout_s: longest wait for one answer.
        committed: stable offsets (True) or high watermarks.
        max_age_s: how old an answer may be when asked again.
        now: monotonic time source.
    """

    def __init__(
        self,
        open_admin: Callable[[], AdminClient],
        timeout_s: float,
        committed: bool,
        max_age_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_admin = open_admin
        self._timeout_s = timeout_s
        self._isolation = (
            IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        )
        self._max_age_s = max_age_s
        self._now = now
        self._admin: AdminClient | None = None
        #: One question at a time; an asker waiting for it takes its answer.
        self._lock = threading.Lock()
        self._asked: dict[Key, float] = {}
        self._answer: dict[Key, int] = {}
        self._answered_at = -float("inf")

    def asker(self, topic: str, partitions: list[int]) -> Ends:
        """A question about ``topic``'s ``partitions``: each call returns their ends (raises
        when Kafka does not answer)."""
        keys = [(topic, p) for p in partitions]

        def ask() -> dict[int, int]:
            answer = self.ends(keys)
            return {p: answer[(topic, p)] for p in partitions}

        return ask

    def ends(self, keys: list[Key]) -> dict[Key, int]:
        """The ends of ``keys``, from an answer at most ``max_age_s`` old."""
        with self._lock:
            now = self._now()
            for key in keys:
                self._asked[key] = now
            fresh = now - self._answered_at <= self._max_age_s
            if not fresh or any(key not in self._answer for key in keys):
                self._refresh(now)
            return {key: self._answer[key] for key in keys}

    def _refresh(self, now: float) -> None:
        self._asked = {k: at for k, at in self._asked.items() if now - at <= _FORGET_AFTER_S}
        if self._admin is None:
            self._admin = self._open_admin()
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        wanted = {TopicPartition(topic, p): latest for topic, p in self._asked}
        try:
            futures = self._admin.list_offsets(
                wanted, isolation_level=self._isolation, request_timeout=self._timeout_s
            )
            answer = {
                (tp.topic, tp.partition): int(f.result(self._timeout_s).offset)
                for tp, f in futures.items()
            }
        except BaseException:
            # librdkafka answers from its metadata cache; after a broker restart a new client
            # asks afresh (see ``admin.StableEnds``).
            self._admin = None
            raise
        self._answer = answer
        self._answered_at = self._now()

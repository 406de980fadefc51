"""A node alone publishes its progress, so a store rebuilt from Kafka does not deliver again.

A replica group's master writes its cut in every delivery transaction. A node alone delivers
without transactions, so it publishes its cut after the fact: every ``interval`` it notes the
frontier's cut (``Frontier.cut``: the frontier and the inner offsets of the adds written before
it moved) and publishes the newest one its persisted seek has reached: every message with a
slot up to that frontier was acknowledged, so "adds below these offsets due by then were
delivered" is true when published. The next occurrences of repeats go out as they are
committed. Records go to the node's own compacted progress topic (``names.alone_progress``) in
the group's format (``schedule/progress_record.py``), with the rebuild floor.

What a store rebuilt after losing its disk delivers again: what was acknowledged after the last
published cut, about ``interval`` plus the seek's lag (the documented crash window); nothing
after a clean stop, whose last cut is published before the node ends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping

import structlog
from confluent_kafka import KafkaError

from chronos.clock import Clock
from chronos.kafka.publisher import OwnedPublisher
from chronos.lifecycle import LoopWorker
from chronos.model import DelayMessage
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, Move
from chronos.schedule.progress_record import Cut, RepeatState, encode_cut, encode_repeat
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: Longest wait for the last records at a clean stop.
_FLUSH_TIMEOUT_S = 10.0


class CutPublisher(LoopWorker):
    """Publishes a node alone's cut and repeat states.

    Parameters:
        frontier: whose cuts are published.
        ledger: the persisted seek a cut must have reached.
        publisher: its own producer (started and stopped with it: it publishes after the
            node's delivery producer stopped), idempotent so records stay in order; its stop
            need not wait for anything (``stop_flush_s`` 0): ``finish`` flushed already.
        topic: the node's progress topic.
        node_id: written into each cut.
        floor: the rebuild floor each cut carries.
        interval_s: how often a cut is noted and published.
        clock: time source.
        published: the cut this node published last (read at start): a cut with an earlier
            frontier is never published after it.
        ready: whether the frontier and seek are this node's own yet (a store being rebuilt
            has not applied ``published``: its frontier says nothing until then).
    """

    def __init__(
        self,
        *,
        frontier: Frontier,
        ledger: Ledger,
        publisher: OwnedPublisher,
        topic: str,
        node_id: str,
        floor: RebuildFloor,
        interval_s: float,
        clock: Clock,
        published: Cut | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__("cut-publisher")
        self._ready = ready
        self._frontier = frontier
        self._ledger = ledger
        self._publisher = publisher
        self._topic = topic
        self._node = node_id
        self._floor = floor
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._repeats: list[RepeatState] = []
        #: Cuts noted and not yet reached by the persisted seek, oldest first.
        self._noted: deque[tuple[EpochMs, dict[int, int]]] = deque()
        #: The cut and floor published last.
        self._last: tuple[EpochMs, dict[int, int]] | None = (
            None if published is None else (published.seek_ms, published.offsets)
        )
        self._last_floor: Floor | None = None if published is None else published.floor
        self.failures = 0

    def repeats_committed(self, written: list[tuple[DelayMessage, EpochMs]]) -> None:
        """Next occurrences the progress worker persisted (``ProgressWorker.on_committed``)."""
        states = [RepeatState(message.id, message, slot) for message, slot in written]
        with self._lock:
            self._repeats += states

    def start(self) -> None:
        self._publisher.start()
        super().start()

    def step(self) -> None:
        self._stop.wait(self._interval_s)
        self.publish_once()

    def finish(self) -> None:
        # Started before the progress worker, this stops after it: the seek is final now.
        self.publish_once()
        left = self._publisher.flush(_FLUSH_TIMEOUT_S)
        if left or self.failures:
            log.error("progress_not_published_at_stop", unanswered=left, failures=self.failures)
        self._publisher.stop()
        self._publisher.join(_FLUSH_TIMEOUT_S)

    def publish_once(self) -> None:
        """Note the frontier's cut and publish the newest one the persisted seek reached (with
        the floor), after the repeat states committed so far."""
        if not self._ready():
            return
        frontier, offsets = self._frontier.cut()
        if not self._noted or self._noted[-1][0] != frontier:
            self._noted.append((frontier, offsets))
        seek = self._ledger.seek_ms
        reached = self._last
        while self._noted and self._noted[0][0] <= seek:
            noted = self._noted.popleft()
            if reached is None or noted[0] >= reached[0]:
                reached = noted
        with self._lock:
            repeats, self._repeats = self._repeats, []
        # After the cut and the repeats: the moves the cut's writes covered are here, and none
        # is older than a repeat state taken. All are published (a store rebuilt from Kafka
        # applies them once its ingest read everything); like the repeats, a failed send is
        # counted, not retried.
        moves = self._ledger.moves()
        for state in repeats:
            self._send(*encode_repeat(state))
        for state in _newer_moves(moves, repeats):
            self._send(*encode_repeat(state))
        self._ledger.forget_moves(moves)
        if reached is None:
            return
        floor = self._floor.current
        if reached == self._last and floor == self._last_floor:
            return
        cut = Cut(0, reached[0], reached[1], self._node, self._clock.now_ms(), floor)
        self._send(*encode_cut(cut))
        self._last, self._last_floor = reached, floor

    def _send(self, key: bytes, value: bytes | None) -> None:
        self._publisher.publish(self._topic, key, value, [], self._done)

    def _done(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self.failures += 1
            log.warning("progress_not_published", error=str(error))


def _newer_moves(moves: Mapping[str, Move], repeats: list[RepeatState]) -> list[RepeatState]:
    """The reschedules to publish after ``repeats``: a move of an earlier occurrence than a
    committed next occurrence is older than it (that occurrence was computed from the move);
    one of the same or a later occurrence was made after it."""
    latest = {st.message_id: st.message.occurrence for st in repeats if st.message is not None}
    return [
        RepeatState(message_id, move.message, move.slot_ms)
        for message_id, move in moves.items()
        if move.message.occurrence >= latest.get(message_id, 0)
    ]

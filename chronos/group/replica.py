"""A replica's role over time: backup (follow the committed progress) or master (deliver).

Roles are start lists here too: a backup runs the follow worker, a master the transactional
delivery worker; ingest, deletion and checkpoints run in both (``node/roles.py``). This
controller moves between them as the election and the producer's fencing say.

Takeover (``_promote``), in this order, each step needed by the next:

1. ``init_transactions`` with the group's ``transactional.id``: the old master is fenced, its
   open transaction aborted, and a commit it had started is finished first.
2. Read the progress topic to its end: the last cut any master committed.
3. Wait until ingest stored every add below that cut, then apply it (seek, repeats).
4. Lead from the cut's seek: adds placed from now on go after it, and adds stored while
   following that the cut does not cover are moved after it (they were not delivered).
5. Wait (bounded) until ingest reached the inner topic's end, so cancels accepted before the
   takeover are applied before anything is delivered.
6. Deliver, with the next term.

Demotion (election lost, or fenced): stop delivering at once (the open transaction is aborted),
place as a follower again, and follow the progress topic, without a restart.
"""

from __future__ import annotations

import threading
import time

import structlog
from confluent_kafka import KafkaException

from chronos.group.election import Election
from chronos.group.follower import Follower, FollowWorker, ProgressLog
from chronos.group.record import Cut
from chronos.group.transactional import Fenced, TransactionalDelivery, transactional_producer
from chronos.kafka.errors import describe
from chronos.node.component import LoopWorker
from chronos.node.context import NodeContext

log = structlog.get_logger(__name__)

_TICK_S = 0.05
#: Pause before trying to lead again after a failed takeover or a fencing.
_RETRY_S = 1.0


class _TakeoverAborted(Exception):
    """The takeover could not complete (stopped, or lost the election meanwhile)."""


class Replica(LoopWorker):
    """Runs this node as its group's backup or master.

    Parameters:
        ctx: the node context.
        partitions: the inner partitions this group owns.
    """

    def __init__(self, ctx: NodeContext, partitions: list[int]) -> None:
        super().__init__("replica")
        self._ctx = ctx
        self._partitions = partitions
        self._changed = threading.Event()
        self._election = Election(ctx.settings, self._on_election)
        self._log = ProgressLog(ctx.settings)
        self._follower = Follower(ctx.ledger, lambda: ctx.ledger.inner_offsets(partitions))
        self._follow: FollowWorker | None = None
        self._delivery: TransactionalDelivery | None = None
        self._retry_at = 0.0
        #: "backup", "master", or "stopped" once this component stopped.
        self.role = "backup"

    @property
    def term(self) -> int:
        """The term this node leads in, or the last term it saw committed."""
        if self._delivery is not None:
            return self._delivery.term
        cut = self._follower.latest
        return 0 if cut is None else cut.term

    def _on_election(self, _elected: bool) -> None:
        self._changed.set()

    def _on_fenced(self, _reason: str) -> None:
        self._changed.set()

    def start(self) -> None:
        self._ctx.ledger.set_leading(False)
        self._start_following()
        self._election.start()
        super().start()

    def stop(self) -> None:
        super().stop()
        self._changed.set()

    def step(self) -> None:
        self._changed.wait(_TICK_S)
        self._changed.clear()
        delivery = self._delivery
        elected = self._election.elected
        if delivery is not None:
            if delivery.fenced is not None:
                self._demote(f"fenced: {delivery.fenced}")
            elif not elected:
                self._demote("election lost")
        elif elected and time.monotonic() >= self._retry_at and not self.stopping:
            try:
                self._promote()
            except Exception as exc:  # any failure: stay a backup that follows, try again later
                expected = isinstance(exc, (_TakeoverAborted, Fenced, KafkaException))
                log.warning(
                    "takeover_failed",
                    reason=str(exc) if expected else repr(exc),
                    retry_in_s=_RETRY_S,
                    exc_info=not expected,
                )
                self._retry_at = time.monotonic() + _RETRY_S
                self._ctx.ledger.set_leading(False)
                if self._follow is None:
                    self._start_following()

    def finish(self) -> None:
        if self._delivery is not None:
            self._stop_delivering()
        self._election.stop()
        self._election.join(10.0)
        self._stop_following()
        self._log.close()
        self.role = "stopped"

    # -- backup -------------------------------------------------------------------------------

    def _start_following(self) -> None:
        self._follow = FollowWorker(self._log, self._follower)
        self._follow.start()
        self.role = "backup"

    def _stop_following(self) -> None:
        follow, self._follow = self._follow, None
        if follow is not None:
            follow.stop()
            follow.join(10.0)

    # -- master -------------------------------------------------------------------------------

    def _promote(self) -> None:
        started = time.monotonic()
        s = self._ctx.settings
        log.info("takeover_started", node=s.node.node_id)
        self._stop_following()
        producer = transactional_producer(s)
        try:
            producer.init_transactions(s.group.transaction_timeout_ms / 1000.0)
        except KafkaException as exc:
            error = exc.args[0]
            raise _TakeoverAborted(f"init_transactions: {describe(error)}") from exc
        fenced_at = time.monotonic()
        cut = self._read_committed_progress()
        self._catch_up_to(cut)
        seek = self._ctx.ledger.lead(
            cut.seek_ms if cut is not None else self._ctx.ledger.seek_ms, self._partitions
        )
        moved = self._ctx.ledger.relocate_uncovered(
            seek, cut.offsets if cut is not None else {}, self._partitions
        )
        caught_up = self._wait_ingest_end()
        term = (cut.term if cut is not None else 0) + 1
        self._delivery = TransactionalDelivery(
            s,
            producer,
            self._ctx.store,
            self._ctx.ledger,
            self._ctx.frontier,
            self._ctx.clock,
            self._ctx.metrics,
            term,
            seek,
            self._on_fenced,
        )
        self._delivery.start()
        self.role = "master"
        self._ctx.metrics.incr("promotions")
        # The group delivered nothing between the old master's last commit and now: the
        # failover as the group saw it (clocks of two machines: approximate).
        gap_ms = None if cut is None else self._ctx.clock.now_ms() - cut.committed_at_ms
        if gap_ms is not None:
            self._ctx.metrics.observe("failover_gap_ms", gap_ms)
        log.info(
            "became_master",
            node=s.node.node_id,
            term=term,
            seek_ms=seek,
            previous_master=cut.node if cut is not None else None,
            relocated=moved,
            ingest_caught_up=caught_up,
            fence_ms=round((fenced_at - started) * 1000),
            takeover_ms=round((time.monotonic() - started) * 1000),
            since_last_commit_ms=gap_ms,
        )

    def _read_committed_progress(self) -> Cut | None:
        """Everything committed to the progress topic, up to its end after the fencing."""
        timeout_s = self._ctx.settings.group.transaction_timeout_ms / 1000.0
        end = self._log.end_offset(timeout_s)
        while self._log.end_reached < end:
            self._check_still_elected()
            self._follower.take(self._log.read(0.1))
        return self._follower.latest

    def _catch_up_to(self, cut: Cut | None) -> None:
        """Apply every committed record: ingest must first store all adds below the cut."""
        deadline = time.monotonic() + self._ctx.settings.group.takeover_catch_up_s
        while self._follower.waiting:
            self._follower.apply_covered()
            if not self._follower.waiting:
                break
            self._check_still_elected()
            if time.monotonic() > deadline:
                raise _TakeoverAborted(
                    f"ingest did not reach the committed cut {cut.offsets if cut else {}} "
                    f"(store at {self._ctx.ledger.inner_offsets(self._partitions)})"
                )
            time.sleep(0.01)

    def _wait_ingest_end(self) -> bool:
        """Wait, bounded, until ingest stored the inner topic up to its end as of now."""
        s = self._ctx.settings
        deadline = time.monotonic() + s.group.takeover_catch_up_s
        ends = self._inner_ends(s.group.takeover_catch_up_s)
        while True:
            stored = self._ctx.ledger.inner_offsets(self._partitions)
            if all(stored.get(p, 0) >= end for p, end in ends.items()):
                return True
            self._check_still_elected()
            if time.monotonic() > deadline:
                log.warning("takeover_before_ingest_caught_up", stored=stored, ends=ends)
                return False
            time.sleep(0.01)

    def _inner_ends(self, timeout_s: float) -> dict[int, int]:
        inner = self._ctx.settings.topics.names.inner
        return {p: self._log.end_offset(timeout_s, inner, p) for p in self._partitions}

    def _check_still_elected(self) -> None:
        if self.stopping:
            raise _TakeoverAborted("stopping")
        if not self._election.elected:
            raise _TakeoverAborted("election lost during the takeover")

    def _demote(self, reason: str) -> None:
        term = self.term
        self._stop_delivering()
        self._ctx.ledger.set_leading(False)
        self._start_following()
        self._retry_at = time.monotonic() + _RETRY_S
        self._ctx.metrics.incr("demotions")
        log.warning("became_backup", node=self._ctx.settings.node.node_id, term=term, reason=reason)

    def _stop_delivering(self) -> None:
        delivery, self._delivery = self._delivery, None
        if delivery is None:
            return
        delivery.stop()
        delivery.join(self._ctx.settings.group.transaction_timeout_ms / 1000.0 + 5)
        if not delivery.is_alive():
            delivery.close()

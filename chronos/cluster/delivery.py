"""A cluster member's delivery loop and its producer, replaced when fenced.

A member delivers every partition it owns through one transactional producer of its own
(``<ns>.delivery.<cluster>.<node>``) and one ``TransactionLoop``, whose ``between`` runs the
member's ownership rounds (``ownership.py``). When a watcher that suspected this member fenced
its producer, every commit of that producer fails: the loop ends every lane, and this worker
then closes it, sends each partition back to following (``OwnershipRound.lanes_lost``: the
store undoes what no commit carried), starts a new producer (its ``init`` fences only this
member's own older epoch) and a new loop; the next rounds claim the partitions back, and win
those nobody claimed since (a retake). A false suspicion costs handovers, never a duplicate
(``docs/design/cluster-v2.md``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from confluent_kafka import KafkaException

from chronos.cluster.ownership import OwnershipRound
from chronos.group.claims import Claimant
from chronos.group.transactions import TransactionLoop
from chronos.kafka.errors import Fenced, NotAuthorized
from chronos.kafka.publisher import TransactionalPublisher
from chronos.lifecycle import LoopWorker
from chronos.schedule.frontier import Wake

log = structlog.get_logger(__name__)

#: How often a running loop is looked at, and how soon a failed start is tried again.
_CHECK_S = 0.1
_RETRY_S = 1.0


class MemberDelivery(LoopWorker):
    """Runs the member's delivery loop; replaces it (and its producer) once it was fenced.

    Parameters:
        open_publisher: a new producer of this member's transactional id (not ``init`` yet).
        new_claimant: the claimant of a producer.
        new_loop: a delivery loop over no lanes yet, on a producer, whose ``between`` is
            ``ownership``.
        ownership: the member's rounds.
        init_timeout_s: longest wait for a new producer's ``init``.
        on_fatal: told when Kafka refuses this member's credentials.
        wake: what the member's lanes and loops share (stopped with a fenced loop, started
            again for the next).
    """

    def __init__(
        self,
        *,
        open_publisher: Callable[[], TransactionalPublisher],
        new_claimant: Callable[[TransactionalPublisher], Claimant],
        new_loop: Callable[[TransactionalPublisher], TransactionLoop],
        ownership: OwnershipRound,
        init_timeout_s: float,
        on_fatal: Callable[[str], None],
        wake: Wake | None = None,
    ) -> None:
        self._wake = wake
        super().__init__("member-delivery")
        self._open_publisher = open_publisher
        self._new_claimant = new_claimant
        self._new_loop = new_loop
        self._ownership = ownership
        self._init_timeout_s = init_timeout_s
        self._on_fatal = on_fatal
        self.loop: TransactionLoop | None = None
        #: Loops ended by a fence so far.
        self.fenced = 0

    def step(self) -> None:
        loop = self.loop
        if loop is None:
            if not self._start_loop():
                self._stop.wait(_RETRY_S)
            return
        if loop.fenced is None and loop.is_alive():
            self._stop.wait(_CHECK_S)
            return
        reason = loop.fenced
        self._end(loop)
        lost = self._ownership.lanes_lost()
        self.fenced += 1
        log.warning("member_delivery_fenced", reason=reason, partitions=lost)

    def _start_loop(self) -> bool:
        began = time.monotonic()
        publisher = self._open_publisher()
        if self._wake is not None:
            self._wake.restart()  # a fenced loop's stop stopped it: waits would return at once
        try:
            publisher.init(self._init_timeout_s)
        except NotAuthorized as exc:
            publisher.close()
            self._on_fatal(str(exc))
            self._stop.set()
            return False
        except (KafkaException, Fenced) as exc:
            publisher.close()
            log.warning("member_producer_not_started", error=str(exc))
            return False
        loop = self._new_loop(publisher)
        self._ownership.attach(loop, self._new_claimant(publisher))
        self.loop = loop  # before it runs: its first round leads through it
        loop.start()
        # How long a new producer took to start (after a fence: part of every takeover).
        log.info("member_producer_started", init_ms=round((time.monotonic() - began) * 1000))
        return True

    def _end(self, loop: TransactionLoop) -> None:
        loop.stop()
        loop.join(30.0)
        try:
            loop.close()
        except Exception:  # a producer that cannot close must not stop the member
            log.exception("member_loop_close_failed")
        self.loop = None

    def finish(self) -> None:
        loop = self.loop
        if loop is not None:
            self._end(loop)
        self._ownership.close()

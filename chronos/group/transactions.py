"""The master's delivery loop: what is due, and the progress that covers it, in one transaction.

Each transaction moves the push frontier to F (at most ``group.transaction_max_records`` due
messages ahead), takes the frontier's cut O, and publishes every message with a slot in
(previous F, F], the dead letters among them, and the progress record (term, F, O, the next
occurrences of the repeats it delivered). Kafka commits all of them or none; only then does
the local store move its seek (a cache of the committed progress). Why one thread: a
transaction is one producer's, its records must all be sent before its commit, and a
``read_committed`` consumer sees nothing of it until then, so overlapping transactions would
buy little and complicate the cut (see ``chronos/group/__init__.py``).

A transaction is three steps, each its own module: **plan** (``plan.py``: each due message
sent, deferred to its next attempt, held back by its topic's rate, followed by its next
occurrence), **execute** (``execute.py``: the plan's records and Kafka's answers) and
**commit** (``commit.py``: an abort's failures judged, or a commit's outcomes recorded). What
the master remembers of failures between transactions is ``verdicts.py``. This loop decides
when a transaction runs and what it covers.

A transaction covers one or more *lanes* (``lane.py``), one per partition the node delivers:
a replica group's loop has one; a cluster node's one per owned partition, all in the same
transaction (one producer per node, not per partition). A replica group's cut goes to its
progress topic. A cluster node's (``node_log``) goes to the node's progress log
(``node_log.py``), so that a transaction touches one progress partition whatever the lanes it
carries, unless the lane's share carries repeat states, names a successor or is its term's
first: then it goes with them to the partition's own log. The transaction commits all of
them or none, so every rule of a replica group holds per lane unchanged. A lane with nothing
due, known without reading its schedule (``Lane.quiet``), costs a transaction nothing.

What goes to the dead-letter topic is the shared policy's call (``delivery/deadletter.py``), as
for a node alone. A record refused at once is dead-lettered in the same transaction; one refused
in its acknowledgement aborts the transaction, and the redo (at once) dead-letters it, or, when
its topic's retry policy says to try again later, *defers* it: the redo moves it to the slot of
its next attempt, as a repeat's next occurrence is moved (a progress state), so one refusing
topic never holds back the others, nor a takeover forgets it. A topic chronos may not write
shows inside a transaction only as purged records; Kafka is then asked which of their topics
it refuses (``kafka.admin.unwritable_topics``). An outage aborts and retries the same range
after a backoff. A fenced producer (another master's ``init``, or Kafka aborting a transaction
left open past ``transaction_timeout_ms``) ends this loop: the node turns into a backup
(``replica.py``). An authorization failure ends the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

import structlog
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import Clock
from chronos.delivery.deadletter import UNKNOWN_TOPIC_CONFIRM_S
from chronos.delivery.job import jobs_for
from chronos.group.commit import judge_abort, observe_paced, outcomes
from chronos.group.execute import BatchRecords
from chronos.group.lane import Lane, LaneBatch
from chronos.group.node_log import NodeLog
from chronos.group.plan import TopicNotYet, in_due_order, plan_ahead, plan_batch
from chronos.group.spec import GroupSpec
from chronos.kafka.errors import Fenced, NotAuthorized, TransactionAborted, describe
from chronos.kafka.publisher import TransactionalPublisher
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.schedule.frontier import Wake
from chronos.schedule.progress_record import Cut, RepeatState
from chronos.settings import DeliverySettings
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: Longest sleep while idle, so the loop notices a stop or a clock jump.
_MAX_WAIT_S = 1.0
#: How soon a loop held back by the cancel gate looks again.
_GATE_RECHECK_S = 0.01
#: A transaction that carried at least this many messages says deliveries flow: the next one
#: lingers (``linger_s``). One message a transaction (a low rate) gains nothing by waiting.
_FLOWING_JOBS = 2


class TransactionLoop(LoopWorker):
    """Delivers its lanes through one fenced transactional publisher until stopped or fenced.

    Parameters:
        spec: the group's names and timings.
        publisher: initialised (``init`` done: the old master is fenced).
        lanes: the partitions it delivers (at least one; ``add_lane`` adds more between
            transactions). A replica group's loop has one.
        retry: backoff between failed transactions.
        clock: time source.
        metrics: counters.
        keep_outcomes: record where each committed delivery went (``store/outcome.py``).
        between: run on the loop's thread before each transaction, none being open: what must
            use the producer between two transactions (a cluster node's claims, which may
            ``add_lane``). ``Fenced`` from it ends the loop as a fenced commit does.
        idle_cuts: a lane with nothing to publish still commits its cut once per
            ``group.progress_interval_ms``: a replica group's master watch reads that as the
            master's sign of life. A cluster node's sign of life is its heartbeat
            (``peer_watch.py``): there an idle lane writes nothing after its first cut, or
            its heartbeat cuts alone would cost the broker in proportion to the partitions.
        node_log: a cluster node's progress log: each lane's cut goes there when its share
            carries nothing else for the partition's own log (``node_log.py``); every lane
            then needs its ``partition``. None: each cut to its lane's progress topic.
        wake: what its lanes' frontiers share, waited on when it has no lane: a cluster
            member's loop starts with none, and its claims (``between``) add them. None:
            ``lanes`` may not be empty.
        max_idle_s: longest wait while idle: how soon ``between`` runs again when nothing
            wakes the loop.
        fence_check_s: without ``idle_cuts``, a loop that committed nothing for this long
            commits the cut of its longest-idle lane: a producer learns that it was fenced
            only from a transaction, and a member fenced while its lanes were idle (frozen,
            then thawed) went on holding them, believing it delivered them, until a message
            fell due (a partition undelivered for 25 s in a churn run). One small transaction
            per period for the whole loop, whatever its lanes. None: never.
        linger_s: while deliveries flow (the last transaction carried at least
            ``_FLOWING_JOBS``), the next one begins this long after the last commit instead
            of ``group.transaction_interval_ms``: fewer, larger transactions under load, each
            costing the broker its commit markers and the loop its per-lane work. At rest
            or at a low rate nothing waits; a message due within ``linger_s`` of a busy
            commit waits at most the rest of it. 0: never (a replica group).
    """

    def __init__(
        self,
        *,
        spec: GroupSpec,
        publisher: TransactionalPublisher,
        lanes: Iterable[Lane],
        retry: DeliverySettings,
        clock: Clock,
        metrics: Metrics,
        keep_outcomes: bool = False,
        between: Callable[[], None] | None = None,
        idle_cuts: bool = True,
        node_log: NodeLog | None = None,
        wake: Wake | None = None,
        max_idle_s: float = _MAX_WAIT_S,
        fence_check_s: float | None = None,
        linger_s: float = 0.0,
    ) -> None:
        super().__init__("transactions")
        self._linger_s = linger_s
        self._between = between
        self._idle_cuts = idle_cuts
        self._node_log = node_log
        self._wake = wake
        self._max_idle_s = max_idle_s
        self._fence_check_s = fence_check_s
        self._lanes = list(lanes)
        if not self._lanes and wake is None:
            raise ValueError("a transaction loop without lanes needs the wake they will share")
        for lane in self._lanes:
            self._check_partition(lane)
        self._first = self._lanes[0] if self._lanes else None
        self._keep_outcomes = keep_outcomes
        group = spec.settings
        self._spec = spec
        self._max_records = group.transaction_max_records
        self._interval_s = group.transaction_interval_ms / 1000.0
        self._heartbeat_s = group.progress_interval_ms / 1000.0
        self._timeout_s = group.transaction_timeout_ms / 1000.0
        self._backoff_ms = retry.retry_backoff_initial_ms
        self._backoff_max_ms = retry.retry_backoff_max_ms
        self._catch_up_ms = int(retry.catch_up_window_s * 1000)
        self._lookahead_ms = group.rate_lookahead_ms
        self._publisher = publisher
        self._clock = clock
        self._metrics = metrics
        #: Lanes added since the last transaction (``add_lane``), taken in by the loop.
        self._joining: list[Lane] = []
        self._joining_lock = threading.Lock()
        #: The last abort judged every failure (no outage): the redo need not wait.
        self._redo_at_once = False
        self._last_commit = 0.0
        #: Messages the last committed transaction carried (``linger_s``).
        self._last_jobs = 0
        self._failures = 0
        #: Monotonic time the last pass of the loop ended, and of the first of the failed
        #: transactions since the last commit (None: the last one committed).
        self._pass_at = time.monotonic()
        self._failing_since: float | None = None
        #: Why this loop stopped delivering for good (fenced, or not authorized), else None.
        self.fenced: str | None = None
        #: Delivery transactions committed (a cluster member's heartbeat says it).
        self.commits = 0
        #: Monotonic time of the first committed transaction (failover measurements).
        self.first_commit_at: float | None = None
        #: Set once every lane was handed over: this loop delivers no more.
        self.released = threading.Event()

    @property
    def term(self) -> int:
        """The term of the lane the loop was built with (a replica group's only one; 0:
        built with none)."""
        return 0 if self._first is None else self._first.term

    @property
    def cut_offset(self) -> int | None:
        """Where the first lane's last committed cut lies (a replica group's retake reads
        from it); None before one."""
        return None if self._first is None else self._first.cut_offset

    @property
    def publisher(self) -> TransactionalPublisher:
        """The producer its transactions (and a cluster member's claims) go through."""
        return self._publisher

    @property
    def lanes(self) -> list[Lane]:
        """The lanes delivered now (a copy; those handed over are left out): those a fence
        ends (a lane whose commit named its successor is that node's now; telling it would
        invite a retake)."""
        return [lane for lane in self._lanes if not lane.released.is_set()]

    def add_lane(self, lane: Lane) -> None:
        """Deliver ``lane`` too, from the next transaction on; that transaction publishes its
        cut even with nothing due, so its progress log shows the new term at once. Its
        frontier must share the loop's wake (``Frontier(wake=...)``) for a write to it to
        wake the loop."""
        self._check_partition(lane)
        with self._joining_lock:
            # A lane handed over stays listed until the next transaction leaves it out: the
            # partition may come back before that.
            known = [
                other for other in (*self._lanes, *self._joining) if not other.released.is_set()
            ]
            if any(other is lane or other.partition == lane.partition for other in known):
                raise ValueError(f"partition {lane.partition} is delivered by this loop already")
            if self.fenced is None:
                self._joining.append(lane)
                lane.frontier.notify(0)
                return
        lane.state.on_fenced(self.fenced)  # it never delivers: its term ends at once

    def _check_partition(self, lane: Lane) -> None:
        if self._node_log is not None and lane.partition is None:
            raise ValueError("a lane whose cuts go to a node log names its partition")

    def stop(self) -> None:
        super().stop()
        for lane in self._lanes:
            lane.frontier.stop()
        if self._wake is not None:
            self._wake.stop()
        self._publisher.interrupt()

    def release(self, successor: str) -> None:
        """Hand every lane to ``successor`` (a replica's node id): the next transaction
        delivers what is due, commits cuts naming it, and is this loop's last
        (``released``). The successor takes over on reading it, without waiting for the
        progress topic to stand still: a handover's gap is one commit and one takeover."""
        with self._joining_lock:
            lanes = [*self._lanes, *self._joining]
        for lane in lanes:
            lane.release(successor)

    def stalled_s(self) -> float:
        """How long this loop has been unable to deliver: since its last pass ended (a pass
        stuck in a call), or since its transactions began to fail; about 0 while it works.
        A cluster member's heartbeat says it owes deliveries once this grows (``due``), so
        that its peers suspect a member alive but stalled."""
        now = time.monotonic()
        failing = 0.0 if self._failing_since is None else now - self._failing_since
        return max(now - self._pass_at, failing)

    def step(self) -> None:
        try:
            self._step()
        finally:
            self._pass_at = time.monotonic()

    def _step(self) -> None:
        try:
            if self.fenced is None:
                self._run_between()
                self._take_lanes()
            if self.fenced is not None or self.released.is_set():
                self._stop.wait(0.1)
                return
            self._deliver_once()
        except Fenced as exc:
            reason = self._end(str(exc))
            log.error("master_fenced", term=self.term, reason=reason)
            self._metrics.incr("fenced")
            for on_fenced in _once([lane.state.on_fenced for lane in self.lanes]):
                on_fenced(reason)
        except NotAuthorized as exc:
            reason = self._end(str(exc))
            self._quiet_abort()
            for on_fatal in _once([lane.state.on_fatal for lane in self.lanes]):
                on_fatal(reason)

    def _run_between(self) -> None:
        """The work between two transactions; a failure of it other than a fence is logged
        and delivery goes on (a claim round that keeps failing must not stop the lanes
        already owned)."""
        if self._between is None:
            return
        try:
            self._between()
        except (Fenced, NotAuthorized):
            raise
        except Exception:
            log.exception("between_transactions_failed", node=self._spec.node_id)

    def _end(self, reason: str) -> str:
        """This loop delivers no more: ``fenced`` set under the lock ``add_lane`` takes, so
        a lane added from now on is told at once, and those waiting to join are taken in to
        be told now."""
        with self._joining_lock:
            self.fenced = reason
            self._lanes += self._joining
            self._joining = []
        return reason

    def finish(self) -> None:
        # Nothing of an open transaction may become visible later; Kafka would also abort it
        # after transaction_timeout_ms, and the next master's init at once.
        self._quiet_abort()

    def close(self) -> None:
        """Release the publisher once the loop has ended: a node demoted and promoted again
        must not keep one per term."""
        self._publisher.close()

    def _quiet_abort(self, fence_ends_loop: bool = False) -> None:
        """Abort, ignoring its failure; ``fence_ends_loop``: but not a fence (nor a refusal)
        after a failed transaction call: a producer whose abort went unanswered is done, and
        the loop ends at once rather than after a backoff and a ``begin`` that says so."""
        ignored = (KafkaException,) if fence_ends_loop else (Fenced, NotAuthorized, KafkaException)
        try:
            self._publisher.abort()
        except ignored:
            pass

    def _take_lanes(self) -> None:
        """Between transactions only: take in the lanes added, leave out those handed over."""
        with self._joining_lock:
            joining, self._joining = self._joining, []
        if joining or any(lane.released.is_set() for lane in self._lanes):
            kept = [lane for lane in self._lanes if not lane.released.is_set()]
            self._lanes = kept + joining if kept or joining else self._lanes
        if joining:
            self.released.clear()  # delivering again: a lane came after every other left

    def _deliver_once(self) -> None:
        if not self._lanes:
            assert self._wake is not None  # checked when built
            self._wake.wait(None, self._clock.now_ms(), self._max_idle_s)
            return
        now = self._clock.now_ms()
        since = time.monotonic() - self._last_commit
        gap_s = self._interval_s
        if self._last_jobs >= _FLOWING_JOBS:
            gap_s = max(gap_s, self._linger_s)
        if since < gap_s:
            self._stop.wait(gap_s - since)
            return
        batches: list[LaneBatch] = []
        idle: list[_Idle] = []
        # A transaction's records stay within transaction_max_records however many lanes
        # it carries (a lane always gets a whole slot: ``Lane.target``).
        budget = max(1, self._max_records // len(self._lanes))
        checked = self._fence_checked()
        for lane in self._lanes:
            batch = self._prepare(lane, now, budget, lane is checked)
            if isinstance(batch, LaneBatch):
                batches.append(batch)
            else:
                idle.append(batch)
        if not batches:
            self._wait_idle(idle, now)
            return
        self._want_next(idle)
        self._want_through(batches, now + round(2 * gap_s * 1000))
        try:
            committed = self._transact(batches)
        except TransactionAborted:
            committed = False
        except TopicNotYet as exc:
            # Asked again shortly: a cluster that creates topics on demand has by then.
            self._publisher.abort()
            log.info("transaction_waits_for_topic", topic=str(exc), wait_s=UNKNOWN_TOPIC_CONFIRM_S)
            self._stop.wait(UNKNOWN_TOPIC_CONFIRM_S)
            return
        except (Fenced, NotAuthorized):
            raise
        except KafkaException as exc:
            # An outage (a broker killed) or a stop mid-transaction: nothing of it may stay
            # open; one line, no traceback, and the same range again after the backoff. An
            # abort Kafka left unanswered for the transaction timeout ends the loop (Fenced).
            self._quiet_abort(fence_ends_loop=True)
            error = exc.args[0] if exc.args else None
            reason = describe(error) if isinstance(error, KafkaError) else str(exc)
            log.warning("transaction_failed", term=self.term, error=reason)
            committed = False
        except Exception:
            # Whatever broke, no transaction may stay open: the next one could not begin.
            self._quiet_abort()
            raise
        finally:
            for batch in batches:
                rates = batch.lane.rates
                if rates is not None:
                    rates.aborted()  # nothing after a commit: it settled the plan
        if committed:
            self.commits += 1
            self._failures = 0
            self._failing_since = None
            self._released(batches)
        elif self._redo_at_once:
            self._redo_at_once = False
            self._metrics.incr("transactions_aborted")
            self._metrics.incr("transactions_redone")
        else:
            if self._failing_since is None:
                self._failing_since = time.monotonic()
            self._failures += 1
            backoff = min(self._backoff_ms << min(self._failures - 1, 10), self._backoff_max_ms)
            self._metrics.incr("transactions_aborted")
            self._stop.wait(backoff / 1000.0)

    def _fence_checked(self) -> Lane | None:
        """The lane whose cut this transaction commits to learn whether the loop was fenced
        (``fence_check_s``): the longest idle one, once the loop committed nothing that
        long; else None."""
        check_s = self._fence_check_s
        if check_s is None or time.monotonic() - self._last_commit < check_s:
            return None
        return min(self._lanes, key=lambda lane: lane.last_commit)

    def _prepare(
        self, lane: Lane, now: EpochMs, budget: int, fence_check: bool = False
    ) -> LaneBatch | _Idle:
        """Move ``lane``'s frontier and read what its share of the transaction covers; or,
        when it has nothing to publish, what its wait needs: a lane known to have nothing
        due (``Lane.quiet``) is not read at all, and one found idle reads its next slot
        once, so that the next transactions skip it until a write touches it.
        ``fence_check``: its cut is committed even with nothing to publish."""
        limit = lane.limit(now)
        releasing = lane.release_to
        since = time.monotonic() - lane.last_commit
        beat = (
            lane.last_commit == 0.0
            or fence_check
            or (self._idle_cuts and since >= self._heartbeat_s)
        )
        if not beat and releasing is None and lane.quiet(limit):
            return _Idle(lane, lane.frontier.value, limit, since)
        # Before the frontier moves: the rows it reads must be covered by this cut.
        ahead = lane.read_ahead(now, limit, self._lookahead_ms)
        lane.frontier.advance(lane.target(limit, budget))
        upto, covered = lane.frontier.cut()
        if ahead is not None and any(covered.get(p, 0) < o for p, o in ahead.covered.items()):
            # The frontier did not move since the read (the cancel gate held it, or the clock
            # did not tick): its cut may not cover the moves' adds, and raising its offsets
            # would count as delivered an add that was already due when it arrived (stored
            # past the frontier, due before it). The next transaction reads again.
            ahead = None
        rows = lane.rows_through(upto)
        # After the cut: every reschedule whose write the cut covers is among these; the rest
        # wait for a cut that covers them (``Move``).
        moves = lane.ledger.moves(covered)
        if not rows and not moves and not beat and releasing is None and not ahead:
            lane.next_slot(upto)  # read once: the next transactions skip this lane
            return _Idle(lane, upto, limit, since)
        jobs = jobs_for(rows, now, lane.ledger, self._catch_up_ms)
        rates = lane.active_rates()
        if rates is not None:
            in_due_order(jobs, rates)
        return LaneBatch(lane, upto, covered, moves, jobs, releasing, ahead, rates)

    def _want_next(self, idle: list[_Idle]) -> None:
        """While other lanes deliver, each idle one asks its cancel gate for its next slot,
        as ``_wait_idle`` does when every lane is idle: a partition that receives nothing is
        proven by the gate's probes only, and those run when a lane wants them. Before, no
        lane wanted anything while any delivered, so a quiet partition's lane waited for its
        next record's append time: with ids that stick to one partition for a while
        (``proxy/sticky_ids.py``) most partitions are quiet at any moment, and one member of
        16 partitions delivered at p99 565 ms instead of 124. The next slot is known here
        (an idle lane read it once), so this reads nothing."""
        for lane, upto, _limit, _since in idle:
            upcoming = lane.next_slot(upto)
            if upcoming is not None:
                lane.want(upcoming)

    @staticmethod
    def _want_through(batches: list[LaneBatch], until: EpochMs) -> None:
        """Each delivering lane asks its cancel gate to reach ``until`` (about the next
        transaction's start): the gate probes Kafka only when its proof would not last
        that long. A partition that stopped receiving records (ids that stick to one
        partition for a while: ``proxy/sticky_ids.py``) is proven by probes only; asked
        only once its lane found nothing deliverable, the probe came one transaction too
        late, and what fell due meanwhile waited a whole linger more: one member of 16
        partitions read p99 pre-commit lateness 130 ms at a 58 ms transaction period."""
        for batch in batches:
            batch.lane.want(until)

    def _wait_idle(self, idle: list[_Idle], now: EpochMs) -> None:
        """Every lane is idle: sleep until the first one's next message is due, a write
        wakes the loop, or an idle cut is due."""
        wake: EpochMs | None = None
        wait_s = self._max_idle_s
        if self._fence_check_s is not None:
            since_commit = time.monotonic() - self._last_commit
            wait_s = max(0.0, min(wait_s, self._fence_check_s - since_commit))
        for lane, upto, limit, since in idle:
            upcoming = lane.next_slot(upto)
            if upcoming is not None:
                lane.want(upcoming)
            if self._idle_cuts:
                wait_s = min(wait_s, self._heartbeat_s - since)
            if upcoming is not None and upcoming <= now:
                # Due, and held by the cancel gate: ingest has not applied up to it yet.
                self._metrics.observe("cancel_gate_held_ms", now - max(limit, upcoming))
                wait_s = min(wait_s, _GATE_RECHECK_S)
            elif upcoming is not None and (wake is None or upcoming < wake):
                wake = upcoming
        idle[0].lane.frontier.wait(wake, self._clock.now_ms(), wait_s)

    def _released(self, batches: list[LaneBatch]) -> None:
        """After a commit: the lanes whose cut named a successor are handed over."""
        for batch in batches:
            if batch.releasing is None:
                continue
            batch.lane.released.set()
            log.info(
                "master_released",
                node=self._spec.node_id,
                term=batch.lane.term,
                partition=batch.lane.partition,
                successor=batch.releasing,
                seek_ms=batch.upto,
            )
        if all(lane.released.is_set() for lane in self._lanes):
            self.released.set()

    def _transact(self, batches: list[LaneBatch]) -> bool:
        """One transaction over ``batches`` (one per lane with something to publish); True
        once committed. Raises Fenced, NotAuthorized, TransactionAborted, TopicNotYet.

        Its three steps: plan (``plan.py``: each job sent, deferred, paced, followed by its
        next occurrence), execute (``execute.py``: the records, in the plan's order) and
        commit (``commit.py``: judge the failures of an abort, or settle what was
        delivered). A lane's ``moves`` (reschedules applied since the last commit) go out as
        repeat states before the delivered repeats' next occurrences, which are always later
        ones: followers and a store rebuilt from Kafka move the message where this store has
        it. A lane's ``releasing``: this commit hands it over (``release``), as read once
        before the transaction, so it stops after exactly the commit that says so."""
        publisher = self._publisher
        refused: list[set[str]] = []
        for batch in batches:
            verdicts = batch.lane.verdicts
            verdicts.judged = set()
            refused.append(verdicts.refused_now(batch.jobs, batch.upto))
        now = self._clock.now_ms()
        began = time.monotonic()
        publisher.begin()
        for batch, refused_topics in zip(batches, refused, strict=True):
            self._publish(batch, refused_topics, now)
        produced_at = time.monotonic()
        left = publisher.flush(self._timeout_s)
        if left or any(batch.records and batch.records.failures for batch in batches):
            self._abort(batches, left)
            return False
        flushed_at = time.monotonic()
        publisher.commit()
        committed_at = time.monotonic()
        # Where a transaction's time goes (node_stats): producing, acknowledgements, commit.
        self._metrics.observe("transaction_produce_ms", round((produced_at - began) * 1000))
        self._metrics.observe("transaction_flush_ms", round((flushed_at - produced_at) * 1000))
        self._metrics.observe("transaction_commit_ms", round((committed_at - flushed_at) * 1000))
        if self.first_commit_at is None:
            self.first_commit_at = time.monotonic()
            log.info(
                "master_first_commit",
                node=self._spec.node_id,
                term=self.term,
                seek_ms=batches[0].upto,
                # Where the first transaction's time went (a takeover's last step), ms.
                phases_ms={
                    "produce": round((produced_at - began) * 1000),
                    "flush": round((flushed_at - produced_at) * 1000),
                    "commit": round((committed_at - flushed_at) * 1000),
                },
            )
        self._last_commit = time.monotonic()
        self._last_jobs = sum(len(batch.jobs) for batch in batches)
        for batch in batches:
            self._committed(batch)
        self._metrics.incr("transactions")
        return True

    def _publish(self, batch: LaneBatch, refused: set[str], now: EpochMs) -> None:
        """Plan one lane's share and publish its records and cut (the transaction begun)."""
        lane, rates = batch.lane, batch.rates
        plan = plan_batch(batch.jobs, batch.upto, now, lane.verdicts, rates, refused)
        if batch.ahead is not None and rates is not None:
            plan_ahead(batch.ahead.rows, rates, plan, lane.skipped_ahead(batch.moves))
            rates.read_ahead(batch.ahead.next_key, batch.ahead.through_ms)
        batch.plan = plan
        moved = [RepeatState(i, m.message, m.slot_ms) for i, m in batch.moves.items()]
        node_log = self._node_log
        # To the partition's own log with what must sit beside it there (its repeat states,
        # a successor's name), and a term's first cut (the log shows the term at once).
        own_log = (
            node_log is None
            or bool(moved or plan.states)
            or batch.releasing is not None
            or lane.logged is None
        )
        batch.own_log = own_log
        seq = None if node_log is None else lane.cuts

        def cut() -> Cut:
            return Cut(
                lane.term,
                batch.upto,
                batch.covered,
                self._spec.node_id,
                self._clock.now_ms(),
                lane.state.floor.current,
                released_to=batch.releasing,
                paced={} if rates is None else rates.backlog(now),
                ahead_ms=None if rates is None else rates.ahead_ms,
                seq=seq,
                logged=None if own_log else lane.logged,
            )

        records = BatchRecords(
            self._publisher, lane.verdicts, self._spec.dead_letter_topic, self._metrics
        )
        batch.records = records
        node_cut = None
        if not own_log:
            assert node_log is not None and lane.partition is not None  # _check_partition
            node_cut = (node_log, lane.partition)
        records.publish(plan, moved, cut, lane.progress_topic, node_cut)

    def _committed(self, batch: LaneBatch) -> None:
        """What a commit settles for one lane: its store follows it, the verdicts of what it
        tried are forgotten, and its outcomes and metrics are recorded."""
        lane, records, jobs = batch.lane, batch.records, batch.jobs
        assert records is not None  # published before any commit
        now = self._clock.now_ms()
        lane.last_commit = self._last_commit
        if batch.own_log:
            lane.logged = lane.cuts
            if records.cut_at:
                lane.cut_offset = records.cut_at[0]
        if lane.cuts == 0 and lane.partition is not None:
            # A cluster member's lane: its term's first commit (failover measurements).
            log.info(
                "lane_first_commit",
                node=self._spec.node_id,
                partition=lane.partition,
                term=lane.term,
                seek_ms=batch.upto,
            )
        lane.cuts += 1
        lane.forget_next()
        # Not the moves: this store made them (and may have moved a message again since).
        lane.replica.apply_cut(batch.upto, batch.plan.states, batch.covered, batch.plan.ahead)
        lane.ledger.forget_moves(batch.moves)
        targets = records.targets
        if self._keep_outcomes:
            found = outcomes(jobs, targets, records.placed, lane.verdicts.dead, now)
            lane.ledger.record_outcomes(found)
        tried = lane.verdicts.settled(jobs, batch.upto)
        rates = batch.rates
        if rates is not None:
            observe_paced(self._metrics, rates, jobs, targets, now)
            rates.committed(tried, batch.upto)
            rates.forget_before(now)
        if targets:
            self._metrics.incr("delivered", len(targets))
        if records.oldest is not None:
            # Due -> committed, which is when read_committed consumers can see it.
            self._metrics.observe("ack_lateness_ms", now - records.oldest)

    def _abort(self, batches: list[LaneBatch], left: int) -> None:
        """Abort; judge each lane's failures (dead-letter or defer in the redo), and say
        whether the redo may follow at once (``_redo_at_once``: every failure, of every lane,
        was the record's own). One lane's refused record aborts every lane's deliveries: the
        redo at once keeps that to one more round trip."""
        at_once = True
        try:
            for n, batch in enumerate(batches):
                records = batch.records
                failures = records.failures if records is not None else {}
                if not failures and not (left and n == 0):
                    continue
                progress = batch.lane.progress_topic
                if not batch.own_log and self._node_log is not None:
                    progress = self._node_log.topic
                topics = (progress, self._spec.dead_letter_topic)
                judged = judge_abort(
                    batch.jobs, failures, left, batch.lane.verdicts, topics, batch.lane.term
                )
                at_once = at_once and judged
        except Fenced:
            self._quiet_abort()
            raise
        self._redo_at_once = at_once
        self._publisher.abort()


class _Idle(NamedTuple):
    """A lane with nothing to publish in this transaction, and what its wait needs."""

    lane: Lane
    upto: EpochMs
    limit: EpochMs
    since: float


def _once(callbacks: list[Callable[[str], None]]) -> list[Callable[[str], None]]:
    """Each callback once, in order (lanes of one node often share theirs)."""
    unique: list[Callable[[str], None]] = []
    for callback in callbacks:
        if callback not in unique:
            unique.append(callback)
    return unique

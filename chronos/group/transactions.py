"""The master's delivery loop: what is due, and the progress that covers it, in one transaction.

Each transaction moves the push frontier to F (at most ``group.transaction_max_records`` due
messages ahead), takes the frontier's cut O, and publishes every message with a slot in
(previous F, F], the dead letters among them, and the progress record (term, F, O, the next
occurrences of the repeats it delivered). Kafka commits all of them or none; only then does
the local store move its seek (a cache of the committed progress). Why one thread: a
transaction is one producer's, its records must all be sent before its commit, and a
``read_committed`` consumer sees nothing of it until then, so overlapping transactions would
buy little and complicate the cut (see ``chronos/group/__init__.py``).

What goes to the dead-letter topic is the shared policy's call (``delivery/deadletter.py``), as
for a node alone. A record refused at once is dead-lettered in the same transaction; one refused
in its acknowledgement aborts the transaction, and the redo (at once) dead-letters it, or, when
its topic's retry policy says to try again later, *defers* it: the redo moves it to the slot of
its next attempt, as a repeat's next occurrence is moved (a progress state), so one refusing
topic never holds back the others, nor a takeover forgets it. A topic chronos may not write
shows inside a transaction only as purged records; Kafka is then asked which of their topics
it refuses (``kafka.admin.unwritable_topics``). An outage aborts and retries the same range
after a backoff. A
fenced producer (another master's ``init``, or Kafka aborting a transaction left open past
``transaction_timeout_ms``) ends this loop: the node turns into a backup (``replica.py``). An
authorization failure ends the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import Clock
from chronos.delivery.attempts import Attempts, AttemptsRecord
from chronos.delivery.deadletter import (
    NOT_YET,
    UNDECODABLE,
    UNKNOWN_TOPIC_CONFIRM_S,
    Before,
    DeadLetterPolicy,
    Failure,
    Refusal,
    TopicMissing,
    dead_letter_headers,
    job_record,
    shrink,
    when_dead_letter_refused,
)
from chronos.delivery.job import DeliveryJob, jobs_for
from chronos.delivery.pacing import TOPIC_LATENESS
from chronos.delivery.policies import Policies
from chronos.delivery.rate_plan import RatePlan
from chronos.group.placement import ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.kafka.errors import (
    ErrorKind,
    Fenced,
    NotAuthorized,
    TransactionAborted,
    classify,
    describe,
)
from chronos.kafka.publisher import TransactionalPublisher
from chronos.lifecycle import LoopWorker
from chronos.metrics import Metrics
from chronos.schedule.floor import RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger, Move
from chronos.schedule.progress_record import Cut, RepeatState, encode_cut, encode_repeat
from chronos.settings import DeliverySettings
from chronos.store import keys, outcome
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs, Headers
from chronos.wire import delivery_headers

log = structlog.get_logger(__name__)

#: Longest sleep while idle, so the loop notices a stop or a clock jump.
_MAX_WAIT_S = 1.0
#: How soon a loop held back by the cancel gate looks again.
_GATE_RECHECK_S = 0.01
#: Index of the progress records among a transaction's failures (jobs are 0..n-1).
_PROGRESS = -1


@dataclass(frozen=True)
class MasterState:
    """What one term of a master is: passed to its loop by the takeover.

    Parameters:
        term: this master's term.
        on_fenced: called once, from the loop's thread, when it may not deliver any more.
        on_fatal: called once when Kafka refuses chronos' credentials (the node ends).
        floor: the rebuild floor each progress record publishes (moved by the refresh worker).
    """

    term: int
    on_fenced: Callable[[str], None]
    on_fatal: Callable[[str], None]
    floor: RebuildFloor = field(default_factory=RebuildFloor)
    #: The rate plans of the last committed cut (``Cut.paced``): where this term's start.
    paced: Mapping[str, float] = field(default_factory=dict)


class TransactionLoop(LoopWorker):
    """Delivers through one fenced transactional publisher until stopped or fenced.

    Parameters:
        spec: the group's names and timings.
        publisher: initialised (``init`` done: the old master is fenced).
        store: the schedule, scanned.
        ledger: the store's writer (owner of the seek; repeat checks).
        replica: applies the committed progress to the store.
        frontier: the push frontier (reset to the seek by the takeover).
        policy: when a delivery goes to the dead-letter topic (shared with a node alone).
        retry: backoff between failed transactions.
        clock: time source.
        metrics: counters.
        state: term and callbacks.
        horizon: the last slot that may be delivered at a given now (the cancel gate,
            ``node/watermark.py``); None: now.
        keep_outcomes: record where each committed delivery went (``store/outcome.py``).
        attempts: where failed attempts are kept for the status lookup.
        policies: each target topic's policy, for its rate (``delivery/rate_plan.py``);
            None: no rates.
    """

    def __init__(
        self,
        *,
        spec: GroupSpec,
        publisher: TransactionalPublisher,
        store: RocksStore,
        ledger: Ledger,
        replica: ReplicaStore,
        frontier: Frontier,
        policy: DeadLetterPolicy,
        retry: DeliverySettings,
        clock: Clock,
        metrics: Metrics,
        state: MasterState,
        horizon: Callable[[EpochMs], EpochMs] | None = None,
        keep_outcomes: bool = False,
        attempts: Attempts | None = None,
        policies: Policies | None = None,
    ) -> None:
        super().__init__("transactions")
        self._attempts = attempts
        self._rates = None if policies is None else RatePlan(policies, state.paced)
        self._horizon = horizon
        self._keep_outcomes = keep_outcomes
        #: (partition, offset) of each job's record, by its index in the open transaction.
        self._placed: dict[int, tuple[int, int]] = {}
        group = spec.settings
        self._spec = spec
        self._max_records = group.transaction_max_records
        self._interval_s = group.transaction_interval_ms / 1000.0
        self._heartbeat_s = group.progress_interval_ms / 1000.0
        self._timeout_s = group.transaction_timeout_ms / 1000.0
        self._backoff_ms = retry.retry_backoff_initial_ms
        self._backoff_max_ms = retry.retry_backoff_max_ms
        self._catch_up_ms = int(retry.catch_up_window_s * 1000)
        self._publisher = publisher
        self._store = store
        self._ledger = ledger
        self._replica = replica
        self._frontier = frontier
        self._policy = policy
        self._clock = clock
        self._metrics = metrics
        self._state = state
        self.term = state.term
        #: Why a message (by key) goes to the dead-letter topic instead of its target.
        self._dead: dict[bytes, str] = {}
        #: Keys whose dead letter the dead-letter topic refused whole: send the shrunk form.
        self._shrink: set[bytes] = set()
        #: When a message's delivery first failed, and how often, by id (the policy gives up
        #: after a while; a deferred message changes its key, not its id).
        self._failed: dict[str, tuple[EpochMs, int]] = {}
        #: When each deferred message is tried again, by id: moved to that slot until then.
        self._retry_at: dict[str, EpochMs] = {}
        #: Jobs (by index) the policy judged while the open transaction was published.
        self._judged: set[int] = set()
        #: The last abort judged every failure (no outage): the redo need not wait.
        self._redo_at_once = False
        #: Target topics whose rights Kafka was asked about (``_refused_now``).
        self._checked: set[str] = set()
        #: Target topics Kafka said chronos may not write, and when it said so: asked again
        #: before an attempt once ``_REFUSAL_HOLDS_MS`` passed.
        self._refused: dict[str, EpochMs] = {}
        self._last_commit = 0.0
        self._failures = 0
        #: Why this loop stopped delivering for good (fenced, or not authorized), else None.
        self.fenced: str | None = None
        #: The progress topic offset of this term's last committed cut (None before one).
        self.cut_offset: int | None = None
        #: Monotonic time of the first committed transaction (failover measurements).
        self.first_commit_at: float | None = None
        #: The replica to hand the delivery to with the next commit (``release``).
        self._release_to: str | None = None
        #: Set once a commit handed the delivery over: this loop delivers no more.
        self.released = threading.Event()

    def stop(self) -> None:
        super().stop()
        self._frontier.stop()
        self._publisher.interrupt()

    def release(self, successor: str) -> None:
        """Hand the delivery to ``successor`` (a replica's node id): the next transaction
        delivers what is due, commits a cut naming it, and is this loop's last
        (``released``). The successor takes over on reading it, without waiting for the
        progress topic to stand still: a handover's gap is one commit and one takeover."""
        self._release_to = successor
        self._frontier.notify(0)  # wake a wait for the next due message

    def step(self) -> None:
        if self.fenced is not None or self.released.is_set():
            self._stop.wait(0.1)
            return
        try:
            self._deliver_once()
        except Fenced as exc:
            self.fenced = str(exc)
            log.error("master_fenced", term=self.term, reason=self.fenced)
            self._metrics.incr("fenced")
            self._state.on_fenced(self.fenced)
        except NotAuthorized as exc:
            self.fenced = str(exc)
            self._quiet_abort()
            self._state.on_fatal(str(exc))

    def finish(self) -> None:
        # Nothing of an open transaction may become visible later; Kafka would also abort it
        # after transaction_timeout_ms, and the next master's init at once.
        self._quiet_abort()

    def close(self) -> None:
        """Release the publisher once the loop has ended: a node demoted and promoted again
        must not keep one per term."""
        self._publisher.close()

    def _quiet_abort(self) -> None:
        try:
            self._publisher.abort()
        except (Fenced, NotAuthorized, KafkaException):
            pass

    def _deliver_once(self) -> None:
        now = self._clock.now_ms()
        since = time.monotonic() - self._last_commit
        if since < self._interval_s:
            self._stop.wait(self._interval_s - since)
            return
        limit = now if self._horizon is None else self._horizon(now)
        target = self._target(limit)
        self._frontier.advance(target)
        upto, covered = self._frontier.cut()
        rows = self._rows_through(upto)
        # After the cut: every reschedule whose write the cut covers is among these; the rest
        # wait for a cut that covers them (``Move``).
        moves = self._ledger.moves(covered)
        releasing = self._release_to
        if not rows and not moves and since < self._heartbeat_s and releasing is None:
            upcoming = self._store.first_key_from(keys.slot_bound(upto + 1))
            wake = None if upcoming is None else keys.slot_of(upcoming)
            wait_s = min(_MAX_WAIT_S, self._heartbeat_s - since)
            if wake is not None and wake <= now:
                # Due, and held by the cancel gate: ingest has not applied up to it yet.
                self._metrics.observe("cancel_gate_held_ms", now - limit)
                wait_s = min(wait_s, _GATE_RECHECK_S)
                wake = None
            self._frontier.wait(wake, self._clock.now_ms(), wait_s)
            return
        jobs = jobs_for(rows, now, self._ledger, self._catch_up_ms)
        rates = self._rates
        if rates is not None and rates.active:
            _in_due_order(jobs, rates)
        try:
            committed = self._transact(jobs, upto, covered, moves, releasing)
        except TransactionAborted:
            committed = False
        except _TopicNotYet as exc:
            # Asked again shortly: a cluster that creates topics on demand has by then.
            self._publisher.abort()
            log.info("transaction_waits_for_topic", topic=str(exc), wait_s=UNKNOWN_TOPIC_CONFIRM_S)
            self._stop.wait(UNKNOWN_TOPIC_CONFIRM_S)
            return
        except (Fenced, NotAuthorized):
            raise
        except KafkaException as exc:
            # An outage (a broker killed) or a stop mid-transaction: nothing of it may stay
            # open; one line, no traceback, and the same range again after the backoff.
            self._quiet_abort()
            error = exc.args[0] if exc.args else None
            reason = describe(error) if isinstance(error, KafkaError) else str(exc)
            log.warning("transaction_failed", term=self.term, error=reason)
            committed = False
        except Exception:
            # Whatever broke, no transaction may stay open: the next one could not begin.
            self._quiet_abort()
            raise
        finally:
            if rates is not None:
                rates.aborted()  # nothing after a commit: it settled the plan
        if committed:
            self._failures = 0
            if releasing is not None:
                self.released.set()
                log.info(
                    "master_released",
                    node=self._spec.node_id,
                    term=self.term,
                    successor=releasing,
                    seek_ms=upto,
                )
        elif self._redo_at_once:
            self._redo_at_once = False
            self._metrics.incr("transactions_aborted")
            self._metrics.incr("transactions_redone")
        else:
            self._failures += 1
            backoff = min(self._backoff_ms << min(self._failures - 1, 10), self._backoff_max_ms)
            self._metrics.incr("transactions_aborted")
            self._stop.wait(backoff / 1000.0)

    def _target(self, now: EpochMs) -> EpochMs:
        """How far this transaction may move the frontier: to now, or short of the slot where
        the due messages pass ``transaction_max_records`` (a whole slot at least)."""
        seek = self._ledger.seek_ms
        rows = self._store.scan(
            keys.slot_bound(seek + 1), keys.slot_bound(now + 1), self._max_records + 1
        )
        if len(rows) <= self._max_records:
            return now
        slot = keys.slot_of(rows[self._max_records][0])
        return slot - 1 if slot - 1 > seek else slot

    def _rows_through(self, upto: EpochMs) -> list[tuple[bytes, bytes]]:
        """Every stored message with a slot in (seek, upto]: all of them, or the cut lies.

        A second scan after ``_target``'s on purpose: writes that completed between that one
        and the frontier's move may hold slots in range."""
        rows: list[tuple[bytes, bytes]] = []
        start, stop = keys.slot_bound(self._ledger.seek_ms + 1), keys.slot_bound(upto + 1)
        while True:
            chunk = self._store.scan(start, stop, 10_000)
            rows += chunk
            if len(chunk) < 10_000:
                return rows
            start = chunk[-1][0] + b"\x00"

    def _transact(
        self,
        jobs: list[DeliveryJob],
        upto: EpochMs,
        covered: dict[int, int],
        moves: Mapping[str, Move],
        released_to: str | None = None,
    ) -> bool:
        """One transaction; True once committed. Raises Fenced, NotAuthorized,
        TransactionAborted.

        ``moves`` (reschedules applied since the last commit) go out as repeat states before
        the delivered repeats' next occurrences, which are always later ones: followers and a
        store rebuilt from Kafka move the message where this store has it. ``released_to``:
        this commit hands the delivery over (``release``), as read once before the
        transaction, so the loop stops after exactly the commit that says so."""
        publisher = self._publisher
        failures: dict[int, KafkaError] = {}
        self._placed = {}
        self._judged = set()
        retrying = self._retry_at
        refused = self._refused_now(jobs, upto)
        rates = self._rates if self._rates is not None and self._rates.active else None
        now = self._clock.now_ms()
        targets: list[int] = []
        began = time.monotonic()
        publisher.begin()
        states: list[RepeatState] = []
        delivered = 0
        oldest: EpochMs | None = None
        for n, job in enumerate(jobs):
            if job.done:
                continue  # a repeat occurrence superseded before a crash
            message = job.message
            if message is not None and (retrying or refused):
                retry_at = retrying.get(message.id)
                if message.topic in refused and (retry_at is None or retry_at <= upto):
                    self._judge(n, job, _not_authorized(message.topic))
                    retry_at = retrying.get(message.id)
                if retry_at is not None and retry_at > upto:
                    states.append(RepeatState(message.id, message, retry_at))  # deferred
                    continue
            # Asked once per job: ``_missing_deferred`` and ``_publish_job`` both need it.
            known = self._dead.get(job.key) or self._policy.reason_before(job)
            if message is not None and self._missing_deferred(n, job, known, upto, states):
                continue
            if rates is not None and message is not None and message.id not in retrying:
                slot = rates.slot_for(
                    message.id, message.topic, keys.slot_of(job.key), job.due_ms, now, upto
                )
                if slot is not None:
                    states.append(RepeatState(message.id, message, slot))  # over the rate
                    continue
            # A reason ``_missing_deferred`` just judged (the last attempt) comes first.
            if self._publish_job(n, job, self._dead.get(job.key) or known, failures):
                targets.append(n)
                delivered += 1
                if oldest is None:
                    oldest = job.lateness_base_ms
            if job.message is not None and job.message.repeat is not None:
                followup = job.followup
                states.append(
                    RepeatState(
                        job.message.id,
                        followup,
                        0 if followup is None else max(followup.due_ms, upto + 1),
                    )
                )
        moved = [RepeatState(i, m.message, m.slot_ms) for i, m in moves.items()]
        cut = Cut(
            self.term,
            upto,
            covered,
            self._spec.node_id,
            self._clock.now_ms(),
            self._state.floor.current,
            released_to=released_to,
            paced={} if rates is None else rates.backlog(now),
        )
        topic = self._spec.progress_topic
        for state in (*moved, *states):
            key, value = encode_repeat(state)
            self._publish(topic, key, value, [], _PROGRESS, failures)
        key, value = encode_cut(cut)
        cut_at: list[int] = []
        publisher.publish(topic, key, value, [], partial(_cut_noted, failures, cut_at))
        produced_at = time.monotonic()
        left = publisher.flush(self._timeout_s)
        if failures or left:
            self._abort(jobs, failures, left)
            return False
        flushed_at = time.monotonic()
        publisher.commit()
        committed_at = time.monotonic()
        if cut_at:
            self.cut_offset = cut_at[0]
        # Where a transaction's time goes (node_stats): producing, acknowledgements, commit.
        self._metrics.observe("transaction_produce_ms", round((produced_at - began) * 1000))
        self._metrics.observe("transaction_flush_ms", round((flushed_at - produced_at) * 1000))
        self._metrics.observe("transaction_commit_ms", round((committed_at - flushed_at) * 1000))
        now = self._clock.now_ms()
        if self.first_commit_at is None:
            self.first_commit_at = time.monotonic()
            log.info("master_first_commit", node=self._spec.node_id, term=self.term, seek_ms=upto)
        self._last_commit = time.monotonic()
        # Not the moves: this store made them (and may have moved a message again since).
        self._replica.apply_cut(upto, states, covered)
        self._ledger.forget_moves(moves)
        if self._keep_outcomes:
            self._ledger.record_outcomes(self._outcomes(jobs, targets, now))
        tried: list[str] = []
        for job in jobs:
            self._dead.pop(job.key, None)
            self._shrink.discard(job.key)
            message = job.message
            ident = job.key.hex() if message is None else message.id
            tried.append(ident)
            retry_at = retrying.get(ident) if retrying else None
            if retry_at is None or retry_at <= upto:  # tried in it: delivered or dead-lettered
                self._failed.pop(ident, None)
                retrying.pop(ident, None)
        if rates is not None:
            self._observe_paced(rates, jobs, targets, now)
            rates.committed(tried)
        if delivered:
            self._metrics.incr("delivered", delivered)
        if oldest is not None:
            # Due -> committed, which is when read_committed consumers can see it.
            self._metrics.observe("ack_lateness_ms", now - oldest)
        self._metrics.incr("transactions")
        return True

    def _observe_paced(
        self, rates: RatePlan, jobs: list[DeliveryJob], targets: list[int], now: EpochMs
    ) -> None:
        """Each limited topic's lateness (``chronos_topic_lateness_seconds``), as a node
        alone's pacing shows it."""
        for n in targets:
            job = jobs[n]
            message = job.message
            if message is not None and rates.limited(message.topic):
                base = rates.lateness_base(message.id) or job.lateness_base_ms
                self._metrics.observe(f"{TOPIC_LATENESS}:{message.topic}", now - base)

    def _outcomes(
        self, jobs: list[DeliveryJob], targets: list[int], now: EpochMs
    ) -> list[tuple[bytes, bytes]]:
        """Where the committed transaction's jobs went: target partition and offset, or the
        dead-letter reason."""
        placed = self._placed
        found: list[tuple[bytes, bytes]] = []
        one_shots: list[outcome.BlockEntry] = []
        for n in targets:
            job = jobs[n]
            partition, offset = placed.get(n, (-1, -1))
            occurrence = job.message.occurrence if job.message is not None else job.occurrence
            if job.followup is None and occurrence == 1:
                one_shots.append((job.key, partition, offset))
                continue
            found.append(
                (job.key[keys.MS_WIDTH :], outcome.delivered(now, partition, offset, occurrence))
            )
        # Targets are in job order, which is key order: blocks (``store/outcome.py``).
        found += outcome.blocks(now, one_shots)
        for job in jobs:
            reason = self._dead.get(job.key)
            if reason is not None:
                occurrence = job.message.occurrence if job.message is not None else 1
                found.append(
                    (job.key[keys.MS_WIDTH :], outcome.dead_lettered(now, occurrence, reason))
                )
        return found

    def _missing_deferred(
        self,
        n: int,
        job: DeliveryJob,
        known: Before,
        upto: EpochMs,
        states: list[RepeatState],
    ) -> bool:
        """Whether ``job``'s topic is missing (``known``: what the policy says before trying)
        and its policy retries it later: then it moves to its next attempt's slot (added to
        ``states``). A missing topic's last attempt is dead-lettered by ``_publish_job``
        (``_judge`` noted the reason)."""
        if not isinstance(known, TopicMissing):
            return False
        message = job.message
        assert message is not None
        if self._judge(n, job, known.error) is not None:
            return False
        retry_at = self._retry_at.get(message.id)
        if retry_at is None or retry_at <= upto:
            return False
        states.append(RepeatState(message.id, message, retry_at))
        return True

    def _publish_job(
        self,
        n: int,
        job: DeliveryJob,
        known: Before,
        failures: dict[int, KafkaError],
    ) -> bool:
        """Publish one job to its target or, when ``known`` (the dead-letter reason already
        decided, or the policy's word before trying) says so, to the dead-letter topic. True
        when it went to its target."""
        message = job.message
        if known is NOT_YET:
            raise _TopicNotYet(message.topic if message else "")
        reason = None if known is None else str(known)
        if reason is None and message is not None:
            headers = delivery_headers(message, job.due_ms, job.skipped)
            on_result = partial(_placed, n, failures, self._placed)
            self._publisher.publish(message.topic, message.key, message.value, headers, on_result)
            refused = failures.get(n)
            if refused is None:
                return True  # queued: its outcome arrives at the flush
            if refused.code() in _PURGED:
                return False  # the transaction went bad before it: ``_abort`` asks why
            # Refused at once (too large, ...): never part of the transaction.
            reason = self._judge(n, job, refused)
            if reason is None:
                return False  # the flush sees the failure and aborts: tried again
            del failures[n]
        self._dead[job.key] = reason or UNDECODABLE
        self._publish_dead_letter(n, job, self._dead[job.key], failures)
        return False

    def _publish_dead_letter(
        self, n: int, job: DeliveryJob, reason: str, failures: dict[int, KafkaError]
    ) -> None:
        message = job.message
        key, value, headers, source, target = job_record(job)
        truncated = None
        if job.key in self._shrink:
            key, headers, truncated = shrink(key, value, headers)
            value = None
        log.error("delivery_dead_lettered", id=message.id if message else None, reason=reason)
        self._metrics.incr("dead_lettered")
        self._publish(
            self._spec.dead_letter_topic,
            key,
            value,
            dead_letter_headers(headers, reason, source, target, truncated),
            n,
            failures,
        )
        refused = failures.get(n)
        if refused is not None and job.key not in self._shrink:
            if when_dead_letter_refused(refused, False) is Refusal.SHRINK:
                del failures[n]
                self._shrink.add(job.key)
                self._publish_dead_letter(n, job, reason, failures)

    def _publish(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        n: int,
        failures: dict[int, KafkaError],
    ) -> None:
        self._publisher.publish(topic, key, value, headers, partial(_noted, n, failures))

    def _judge(self, n: int, job: DeliveryJob, error: KafkaError) -> str | None:
        """The policy's verdict on one more failure of ``job``'s delivery: the reason it goes
        to the dead-letter topic (kept for the redo), or None to try it again, later (deferred,
        when the error concerns its topic) or in the redo (an outage)."""
        self._judged.add(n)
        now = self._clock.now_ms()
        message = job.message
        ident = job.key.hex() if message is None else message.id
        first, attempts = self._failed.get(ident, (now, 0))
        attempts += 1
        self._failed[ident] = (first, attempts)
        topic = None if message is None else message.topic
        reason = self._policy.reason_after(error, Failure(topic, job.due_ms, first, attempts, now))
        retry_at: EpochMs | None = None
        if reason is not None:
            self._dead[job.key] = reason
        elif message is not None and classify(error) not in _SAYS_NOTHING:
            retry_at = now + self._policy.retry_delay_ms(topic, attempts)
            self._retry_at[message.id] = retry_at
        if self._attempts is not None and message is not None and (reason or retry_at):
            record = AttemptsRecord(attempts, describe(error), now, retry_at)
            self._attempts.failed(message.id, record)
        return reason

    def _abort(self, jobs: list[DeliveryJob], failures: dict[int, KafkaError], left: int) -> None:
        """Abort; judge each failure (dead-letter or defer in the redo), and say whether the
        redo may follow at once (``_redo_at_once``: every failure was the record's own)."""
        outage = left > 0
        purged: list[int] = []
        for n, error in failures.items():
            kind = classify(error)
            if kind is ErrorKind.FENCED:
                self._quiet_abort()
                raise Fenced(describe(error))
            if n == _PROGRESS or not 0 <= n < len(jobs):
                if kind is ErrorKind.AUTHORIZATION:
                    raise NotAuthorized(f"writing {self._spec.progress_topic}", error)
                outage = True
                continue
            key = jobs[n].key
            if key in self._dead:  # the dead letter itself was refused
                refusal = when_dead_letter_refused(error, key in self._shrink)
                if refusal is Refusal.FATAL:
                    raise NotAuthorized(f"writing {self._spec.dead_letter_topic}", error)
                if refusal is Refusal.SHRINK:
                    self._shrink.add(key)
                else:
                    outage = True
                continue
            if n in self._judged:
                continue
            if error.code() in _PURGED:
                purged.append(n)
            elif kind is ErrorKind.OUTAGE:
                outage = True
            else:
                self._judge(n, jobs[n], error)
        if purged:
            outage = self._judge_purged(jobs, purged) or outage
        self._redo_at_once = not outage
        first = next(iter(failures.values()), None)
        log.warning(
            "transaction_aborted",
            term=self.term,
            records=len(jobs),
            to_dead_letters=sum(jobs[n].key in self._dead for n in failures if 0 <= n < len(jobs)),
            deferred=sum(1 for n in failures if 0 <= n < len(jobs) and self._is_deferred(jobs[n])),
            unanswered=left,
            error=describe(first) if first is not None else "flush timed out",
        )
        self._publisher.abort()

    def _judge_purged(self, jobs: list[DeliveryJob], purged: list[int]) -> bool:
        """Judge records Kafka purged from the transaction: those of a topic chronos may not
        write failed for that; True when none is (the purge says nothing: retry the range)."""
        topic_of: dict[int, str] = {}
        for n in purged:
            message = jobs[n].message
            if message is not None:
                topic_of[n] = message.topic
        refused = self._policy.unwritable(set(topic_of.values()))
        if not refused:
            return True
        self._refused.update(dict.fromkeys(refused, self._clock.now_ms()))
        for n, topic in topic_of.items():
            if topic in refused:
                self._judge(n, jobs[n], _not_authorized(topic))
        return False

    def _refused_now(self, jobs: list[DeliveryJob], upto: EpochMs) -> set[str]:
        """The target topics of this transaction's attempts that chronos may not write.

        Asked of Kafka for a topic not seen before and for one refused before, never inside
        the transaction: a record to a refused topic fails the transaction as a whole, and
        when it is the first of it, its abort ends the producer (Apache Kafka 4.1.1 answers
        ``INVALID_TXN_STATE``: a term's retake each time). So a refused topic costs a
        question per attempt, not an abort."""
        checked, refused, retrying = self._checked, self._refused, self._retry_at
        now = self._clock.now_ms()
        ask: set[str] = set()
        held: set[str] = set()
        for job in jobs:
            message = job.message
            if message is None or job.done:
                continue
            topic = message.topic
            if topic in checked and topic not in refused:
                continue
            retry_at = retrying.get(message.id) if retrying else None
            if retry_at is not None and retry_at > upto:
                continue  # deferred, not tried in this transaction
            asked = refused.get(topic)
            if asked is not None and now - asked < _REFUSAL_HOLDS_MS:
                held.add(topic)  # asked a moment ago: a question per transaction cost too much
            else:
                ask.add(topic)
        if not ask:
            return held
        answer = self._policy.unwritable(ask)
        if answer is None:
            return held  # Kafka did not answer: asked again at the next sight
        checked |= ask
        for topic in ask:
            if topic in answer:
                refused[topic] = now
            else:
                refused.pop(topic, None)
        return held | answer

    def _is_deferred(self, job: DeliveryJob) -> bool:
        message = job.message
        return message is not None and message.id in self._retry_at


#: Errors that say nothing about one record: never a reason to defer it.
_SAYS_NOTHING = frozenset({ErrorKind.OUTAGE, ErrorKind.FENCED})
#: A record librdkafka dropped from a transaction gone bad, or refused to take into one
#: (``_STATE``): its own fault or another record's, which only Kafka's answer about the
#: topics tells (``_judge_purged``).
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._STATE})
#: How long a topic Kafka refused counts as refused without asking again, ms.
_REFUSAL_HOLDS_MS = 1_000


def _not_authorized(topic: str) -> KafkaError:
    """The error a record of ``topic`` failed with, as Kafka's authorizer told it."""
    return KafkaError(
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        f"Topic authorization failed: chronos may not write {topic} (from its authorized "
        "operations)",
    )


def _in_due_order(jobs: list[DeliveryJob], rates: RatePlan) -> None:
    """Put the jobs of rate-limited topics in due order, in their places among the others:
    messages planned into one slot are stored in id order, and would go out of due order."""
    places = [n for n, job in enumerate(jobs) if job.message and rates.limited(job.message.topic)]
    if len(places) < 2:
        return
    ordered = sorted((jobs[n] for n in places), key=_due)
    for n, job in zip(places, ordered, strict=True):
        jobs[n] = job


def _due(job: DeliveryJob) -> EpochMs:
    return job.due_ms


class _TopicNotYet(Exception):
    """A target topic was unknown at a first look; the transaction waits for a second."""


def _placed(
    n: int,
    failures: dict[int, KafkaError],
    placed: dict[int, tuple[int, int]],
    error: KafkaError | None,
    msg: Any,
) -> None:
    """A delivery's outcome: where it landed (the status lookup's answer), or its failure."""
    if error is None:
        if msg is not None:
            placed[n] = (msg.partition(), msg.offset())
    else:
        failures.setdefault(n, error)


def _cut_noted(
    failures: dict[int, KafkaError], cut_at: list[int], error: KafkaError | None, msg: Any
) -> None:
    """The cut record's outcome: its offset (where a retake reads from), or its failure."""
    if error is not None:
        failures.setdefault(_PROGRESS, error)
    elif msg is not None and msg.offset() is not None:
        cut_at.append(msg.offset())


def _noted(n: int, failures: dict[int, KafkaError], error: KafkaError | None, _msg: Any) -> None:
    """A record's outcome: a failure is kept, by the job's index (the first one wins)."""
    if error is not None:
        failures.setdefault(n, error)

"""The master's delivery loop: what is due, and the progress that covers it, in one transaction.

Each transaction moves the push frontier to F (at most ``group.transaction_max_records`` due
messages ahead), takes the frontier's cut O, and produces every message with a slot in
(previous F, F], the dead letters among them, and the progress record (term, F, O, the next
occurrences of the repeats it delivered). Kafka commits all of them or none; only then does
the local store move its seek (a cache of the committed progress). Why one thread: a
transaction is one producer's, its records must all be sent before its commit, and a
``read_committed`` consumer sees nothing of it until then, so overlapping transactions would
buy little and complicate the cut (see ``chronos/group/__init__.py``).

Failures inside a transaction: a record refused for good (too large, unknown topic) aborts the
transaction once; it is then dead-lettered inside the next one, so one bad record never
abort-loops its batch. An outage aborts and retries the same range after a backoff. A fenced
producer (another master's ``init_transactions``, or Kafka aborting a transaction left open past
``transaction_timeout_ms``) ends this loop: the node turns into a backup (``replica.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer

from chronos.clock import Clock
from chronos.group.record import Cut, encode_cut, encode_repeat
from chronos.kafka.errors import describe, is_permanent
from chronos.metrics import Metrics
from chronos.node.component import LoopWorker
from chronos.node.deadletter import dead_letter_headers, job_record, shrink
from chronos.node.frontier import Frontier
from chronos.node.job import DeliveryJob
from chronos.node.ledger import Ledger, RepeatState
from chronos.node.push import jobs_for
from chronos.settings import ChronosSettings, KafkaValue
from chronos.store import keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs
from chronos.wire import delivery_headers

log = structlog.get_logger(__name__)

#: Longest sleep while idle, so the loop notices a stop or a clock jump.
_MAX_WAIT_S = 1.0
#: Errors that mean another producer took over this transactional.id (or Kafka gave up on us).
_FENCED = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError._FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError._FATAL,
    }
)
#: How long a topic missing from Kafka's metadata stays missing before it is asked again.
_UNKNOWN_TOPIC_RECHECK_S = 1.0


class Fenced(Exception):
    """This master may not deliver any more: another one fenced it, or Kafka aborted it."""


def is_fenced(error: KafkaError) -> bool:
    """True when ``error`` means this transactional producer is done for."""
    return error.fatal() or error.code() in _FENCED


def transactional_producer(settings: ChronosSettings) -> Producer:
    """A producer with the group's ``transactional.id`` (not initialised yet)."""
    group = settings.group
    if group.name is None:
        raise ValueError("transactional delivery needs group.name")
    options: dict[str, KafkaValue] = {
        "transactional.id": settings.topics.names.transactional_id(group.name),
        "transaction.timeout.ms": group.transaction_timeout_ms,
        "message.timeout.ms": group.transaction_timeout_ms,
        "linger.ms": 5,
        "client.id": f"chronos-delivery-{settings.node.node_id}",
    }
    return Producer(settings.kafka.producer(settings.limits.max_message_bytes, **options))


class TransactionalDelivery(LoopWorker):
    """Delivers through one fenced transactional producer until stopped or fenced.

    Parameters:
        settings: the settings tree.
        producer: initialised (``init_transactions`` done: the old master is fenced).
        store: the schedule.
        ledger: writes the committed progress to the store.
        frontier: the push frontier (reset to ``seek_ms`` by the caller).
        clock: time source.
        metrics: counters.
        term: this master's term.
        seek_ms: the committed seek this master starts from.
        on_fenced: called once, from this worker's thread, when it was fenced.
    """

    def __init__(
        self,
        settings: ChronosSettings,
        producer: Producer,
        store: RocksStore,
        ledger: Ledger,
        frontier: Frontier,
        clock: Clock,
        metrics: Metrics,
        term: int,
        seek_ms: EpochMs,
        on_fenced: Callable[[str], None],
    ) -> None:
        super().__init__("transactions")
        group = settings.group
        assert group.name is not None
        names = settings.topics.names
        self._node = settings.node.node_id
        self._progress_topic = names.progress(group.name)
        self._dead_topic = names.dead_letter
        self._max_records = group.transaction_max_records
        self._interval_s = group.transaction_interval_ms / 1000.0
        self._heartbeat_s = group.progress_interval_ms / 1000.0
        self._timeout_s = group.transaction_timeout_ms / 1000.0
        self._backoff_ms = settings.delivery.retry_backoff_initial_ms
        self._backoff_max_ms = settings.delivery.retry_backoff_max_ms
        self._producer = producer
        self._store = store
        self._ledger = ledger
        self._frontier = frontier
        self._clock = clock
        self._metrics = metrics
        self.term = term
        self._seek = seek_ms
        self._on_fenced = on_fenced
        #: Why a message (by key) goes to the dead-letter topic instead of its target.
        self._dead: dict[bytes, str] = {}
        #: Keys whose dead letter the dead-letter topic refused whole: send the shrunk form.
        self._shrink: set[bytes] = set()
        self._known_topics: set[str] = set()
        self._missing_topics: dict[str, float] = {}
        self._last_commit = 0.0
        self._failures = 0
        self.fenced: str | None = None
        #: Monotonic time of the first committed transaction (failover measurements).
        self.first_commit_at: float | None = None

    @property
    def seek_ms(self) -> EpochMs:
        """The committed seek."""
        return self._seek

    def stop(self) -> None:
        super().stop()
        self._frontier.stop()

    def step(self) -> None:
        if self.fenced is not None:
            self._stop.wait(0.1)
            return
        try:
            self._deliver_once()
        except Fenced as exc:
            self.fenced = str(exc)
            log.error("master_fenced", term=self.term, reason=self.fenced)
            self._metrics.incr("fenced")
            self._on_fenced(self.fenced)

    def finish(self) -> None:
        try:
            # Nothing of an open transaction may become visible later; Kafka would also abort
            # it after transaction_timeout_ms, and the next master's init_transactions at once.
            self._producer.abort_transaction(5.0)
        except KafkaException:
            pass

    def _deliver_once(self) -> None:
        now = self._clock.now_ms()
        since = time.monotonic() - self._last_commit
        if since < self._interval_s:
            self._stop.wait(self._interval_s - since)
            return
        target = self._target(now)
        self._frontier.advance(target)
        upto, covered = self._frontier.cut()
        rows = self._rows_through(upto)
        if not rows and since < self._heartbeat_s:
            upcoming = self._store.first_key_from(keys.slot_bound(upto + 1))
            wake = None if upcoming is None else keys.slot_of(upcoming)
            wait_s = min(_MAX_WAIT_S, self._heartbeat_s - since)
            self._frontier.wait(wake, self._clock.now_ms(), wait_s)
            return
        jobs = jobs_for(rows, now, self._ledger)
        try:
            committed = self._transact(jobs, upto, covered)
        except _Aborted:
            committed = False
        except Fenced:
            raise
        except Exception:
            # Whatever broke, no transaction may stay open: the next one could not begin.
            self._call(self._producer.abort_transaction, self._timeout_s, quiet=True)
            raise
        if committed:
            self._failures = 0
        else:
            self._failures += 1
            backoff = min(self._backoff_ms << min(self._failures - 1, 10), self._backoff_max_ms)
            self._metrics.incr("transactions_aborted")
            self._stop.wait(backoff / 1000.0)

    def _target(self, now: EpochMs) -> EpochMs:
        """How far this transaction may move the frontier: to now, or short of the slot where
        the due messages pass ``transaction_max_records`` (a whole slot at least)."""
        rows = self._store.scan(
            keys.slot_bound(self._seek + 1), keys.slot_bound(now + 1), self._max_records + 1
        )
        if len(rows) <= self._max_records:
            return now
        slot = keys.slot_of(rows[self._max_records][0])
        return slot - 1 if slot - 1 > self._seek else slot

    def _rows_through(self, upto: EpochMs) -> list[tuple[bytes, bytes]]:
        """Every stored message with a slot in (seek, upto]: all of them, or the cut lies.

        A second scan after ``_target``'s on purpose: writes that completed between that one
        and the frontier's move may hold slots in range."""
        rows: list[tuple[bytes, bytes]] = []
        start, stop = keys.slot_bound(self._seek + 1), keys.slot_bound(upto + 1)
        while True:
            chunk = self._store.scan(start, stop, 10_000)
            rows += chunk
            if len(chunk) < 10_000:
                return rows
            start = chunk[-1][0] + b"\x00"

    def _transact(self, jobs: list[DeliveryJob], upto: EpochMs, covered: dict[int, int]) -> bool:
        """One transaction; True once committed. Raises Fenced."""
        producer = self._producer
        failures: dict[int, KafkaError] = {}
        began = time.monotonic()
        self._call(producer.begin_transaction)
        states: list[RepeatState] = []
        delivered = 0
        oldest: EpochMs | None = None
        for n, job in enumerate(jobs):
            if job.done:
                continue  # a repeat occurrence superseded before a crash
            if self._produce_job(n, job, failures):
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
        cut = Cut(self.term, upto, covered, self._node, self._clock.now_ms())
        for state in states:
            key, value = encode_repeat(state)
            self._produce(self._progress_topic, key, value, None, -1, failures)
        key, value = encode_cut(cut)
        self._produce(self._progress_topic, key, value, None, -1, failures)
        produced_at = time.monotonic()
        left = self._flush()
        if failures or left:
            self._abort(jobs, failures, left)
            return False
        flushed_at = time.monotonic()
        self._commit()
        committed_at = time.monotonic()
        # Where a transaction's time goes (node_stats): producing, acknowledgements, commit.
        self._metrics.observe("transaction_produce_ms", round((produced_at - began) * 1000))
        self._metrics.observe("transaction_flush_ms", round((flushed_at - produced_at) * 1000))
        self._metrics.observe("transaction_commit_ms", round((committed_at - flushed_at) * 1000))
        now = self._clock.now_ms()
        if self.first_commit_at is None:
            self.first_commit_at = time.monotonic()
            log.info("master_first_commit", term=self.term, seek_ms=upto)
        self._last_commit = time.monotonic()
        self._ledger.apply_cut(upto, states, covered)
        self._seek = upto
        for job in jobs:
            self._dead.pop(job.key, None)
            self._shrink.discard(job.key)
        if delivered:
            self._metrics.incr("delivered", delivered)
        if oldest is not None:
            # Due -> committed, which is when read_committed consumers can see it.
            self._metrics.observe("ack_lateness_ms", now - oldest)
        self._metrics.incr("transactions")
        return True

    def _flush(self) -> int:
        """Wait for the transaction's records to be acknowledged; how many were not."""
        try:
            return int(self._producer.flush(self._timeout_s))
        except KafkaException as exc:
            if is_fenced(exc.args[0]):
                raise Fenced(describe(exc.args[0])) from None
            raise
        except SystemError as exc:
            # confluent-kafka serves the callbacks of a producer that just failed fatally (as
            # fenced ones do) with the error still set, and the first callback raises this.
            # The producer keeps the error: without its traceback it cannot keep this loop's
            # frames (and through them the producer itself) alive.
            exc.__traceback__ = None
            raise Fenced(f"the producer failed while flushing: {exc}") from None

    def close(self) -> None:
        """Release the producer (its threads and connections) once the loop has ended: a node
        demoted and promoted again must not keep one per term."""
        producer = self._producer
        producer.purge()
        producer.poll(0)
        del self._producer

    def _produce_job(self, n: int, job: DeliveryJob, failures: dict[int, KafkaError]) -> bool:
        """Produce one job to its target or, when it has a reason, to the dead-letter topic.
        True when it went to its target."""
        reason = self._dead.get(job.key) or job.dead_reason
        message = job.message
        if reason is None and message is not None:
            reason = self._unknown_topic(message.topic)
        if reason is None and message is not None:
            headers = delivery_headers(message, job.due_ms, job.skipped)
            refused = self._produce(message.topic, message.key, message.value, headers, n, failures)
            if refused is None:
                return True
            reason = self._dead[job.key] = refused
        self._produce_dead_letter(n, job, reason or "undecodable stored message", failures)
        return False

    def _produce_dead_letter(
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
        refused = self._produce(
            self._dead_topic,
            key,
            value,
            dead_letter_headers(headers, reason, source, target, truncated),
            n,
            failures,
        )
        if refused is not None and job.key not in self._shrink:
            self._shrink.add(job.key)
            self._produce_dead_letter(n, job, reason, failures)

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
        n: int,
        failures: dict[int, KafkaError],
    ) -> str | None:
        """Queue one record in the transaction; the reason when librdkafka refused it at once
        for good (too large), None when queued (its outcome arrives at the flush)."""
        while True:
            try:
                noted = partial(self._noted, n, failures)
                self._producer.produce(topic, value, key, headers=headers, on_delivery=noted)
                return None
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if is_fenced(error):
                    raise Fenced(describe(error)) from exc
                if is_permanent(error):
                    return describe(error)
                raise

    @staticmethod
    def _noted(
        n: int, failures: dict[int, KafkaError], error: KafkaError | None, _msg: Any
    ) -> None:
        if error is not None:
            failures.setdefault(n, error)

    def _unknown_topic(self, topic: str) -> str | None:
        """A reason when ``topic`` does not exist: in a transaction librdkafka would hold the
        record (and the commit) for the whole metadata timeout before failing it."""
        if topic in self._known_topics:
            return None
        checked = self._missing_topics.get(topic)
        if checked is None or time.monotonic() - checked > _UNKNOWN_TOPIC_RECHECK_S:
            meta = self._producer.list_topics(topic, timeout=self._timeout_s).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                self._known_topics.add(topic)
                self._missing_topics.pop(topic, None)
                return None
            self._missing_topics[topic] = time.monotonic()
        return f"UNKNOWN_TOPIC_OR_PART: topic {topic} does not exist"

    def _abort(self, jobs: list[DeliveryJob], failures: dict[int, KafkaError], left: int) -> None:
        """Abort; remember which records failed for good, so the retry dead-letters them."""
        for error in failures.values():
            if is_fenced(error):
                self._call(self._producer.abort_transaction, self._timeout_s, quiet=True)
                raise Fenced(describe(error))
        permanent = 0
        for n, error in failures.items():
            if 0 <= n < len(jobs) and is_permanent(error):
                key = jobs[n].key
                if key in self._dead:
                    self._shrink.add(key)  # the dead letter itself was refused
                else:
                    self._dead[key] = describe(error)
                permanent += 1
        first = next(iter(failures.values()), None)
        log.warning(
            "transaction_aborted",
            term=self.term,
            records=len(jobs),
            refused_for_good=permanent,
            unanswered=left,
            error=describe(first) if first is not None else "flush timed out",
        )
        self._call(self._producer.abort_transaction, self._timeout_s)

    def _commit(self) -> None:
        """Commit, retrying what librdkafka says may be retried: giving up on a commit whose
        outcome is unknown and aborting could hide records already visible."""
        while True:
            try:
                self._producer.commit_transaction(self._timeout_s)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if is_fenced(error):
                    raise Fenced(describe(error)) from exc
                if error.txn_requires_abort():
                    self._call(self._producer.abort_transaction, self._timeout_s)
                    raise _Aborted(describe(error)) from exc
                if not error.retriable() or self.stopping:
                    raise
                log.warning("transaction_commit_retry", error=describe(error))

    def _call(self, method: Callable[..., None], *args: Any, quiet: bool = False) -> None:
        """A transaction API call; fenced or fatal raises Fenced, retriable ones are retried."""
        while True:
            try:
                method(*args)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if is_fenced(error):
                    if quiet:
                        return
                    raise Fenced(describe(error)) from exc
                if not error.retriable() or self.stopping:
                    if quiet:
                        return
                    raise
                time.sleep(0.1)


class _Aborted(Exception):
    """A commit Kafka refused in a way that needs an abort; the range is retried."""

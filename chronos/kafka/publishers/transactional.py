"""The transactional publisher: a replica group's master delivers through it.

It turns librdkafka's transaction API into the ``TransactionalPublisher`` seam: retriable errors
are retried here, and what remains is raised as one of three exceptions the master's loop acts
on (``chronos/kafka/errors.py``): ``Fenced`` (its term is over), ``NotAuthorized`` (the node
ends) and ``TransactionAborted`` (the range is tried again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, Producer

from chronos.kafka.errors import (
    ErrorKind,
    Fenced,
    NotAuthorized,
    TransactionAborted,
    classify,
    describe,
)
from chronos.kafka.librdkafka import (
    ClientErrors,
    OnFatal,
    TransactionFailures,
    lists_topic,
    producer,
)
from chronos.kafka.publisher import ANY_PARTITION, DeliveryCallback
from chronos.logs import Throttle
from chronos.types import Headers, KafkaConfig

log = structlog.get_logger(__name__)

_RETRY_PAUSE_S = 0.1
#: Longest wait of an abort once the publisher was interrupted.
_INTERRUPTED_ABORT_S = 1.0
#: A flush waits in slices this long, and stops between two once the transaction failed.
FLUSH_SLICE_S = 0.1


class TransactionalProducer:
    """A producer with a ``transactional.id``, behind the ``TransactionalPublisher`` seam.

    Parameters:
        config: librdkafka config with ``transactional.id`` (``KafkaClients.transactional``).
        name: for logs.
        timeout_s: the transaction timeout: longest wait of any one call.
        on_fatal: told when Kafka refuses chronos' credentials (client-level errors).
        error_log: the throttle its client error lines share with the process' other clients.
        failures: its librdkafka lines' watcher (a test's, to say a transaction failed); None:
            its own.
    """

    def __init__(
        self,
        config: KafkaConfig,
        name: str,
        timeout_s: float,
        on_fatal: OnFatal | None = None,
        error_log: Throttle | None = None,
        failures: TransactionFailures | None = None,
    ) -> None:
        self.name = name
        self._timeout_s = timeout_s
        errors = ClientErrors(name, on_fatal, error_log=error_log)
        self._failures = failures or TransactionFailures()
        self._producer: Producer | None = producer(config, errors, self._failures)
        self._interrupted = threading.Event()
        #: Why this producer can deliver nothing more (its abort went unanswered); None: it can.
        self._lost: str | None = None

    def _live(self) -> Producer:
        if self._producer is None:
            raise Fenced(f"{self.name} was closed")
        if self._lost is not None:
            raise Fenced(self._lost)  # every call after it too: a quiet abort ignored it
        return self._producer

    def init(self, timeout_s: float) -> None:
        try:
            self._live().init_transactions(timeout_s)
        except KafkaException as exc:
            self._raise_for(exc.args[0], "init_transactions")
            raise

    def begin(self) -> None:
        self._failures.clear()
        self._call(self._live().begin_transaction)

    def publish(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_done: DeliveryCallback,
        partition: int = ANY_PARTITION,
    ) -> None:
        live = self._live()
        while True:
            try:
                live.produce(topic, value, key, partition, headers=headers, on_delivery=on_done)  # type: ignore[arg-type]
                return
            except BufferError:
                live.poll(0.05)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                self._raise_for(error, f"produce to {topic}")
                on_done(error, None)  # refused at once for this record (too large, ...)
                return

    def flush(self, timeout_s: float) -> int:
        """Wait for the transaction's records; returns how many are still unanswered.

        Waits in ``FLUSH_SLICE_S`` slices, and stops early once librdkafka said the
        transaction failed (``TransactionFailures``) and a whole slice then brought no
        answer: what is left waits for the abort, not for Kafka. Answers still coming (a
        refused record's neighbours in flight) are waited for, so that each failure is
        judged as its own."""
        live = self._live()
        until = time.monotonic() + timeout_s
        before = -1
        try:
            while True:
                left = int(live.flush(max(0.0, min(FLUSH_SLICE_S, until - time.monotonic()))))
                if not left or time.monotonic() >= until:
                    return left
                reason = self._failures.reason
                if reason is not None and left == before:
                    log.warning("transaction_failed_while_flushing", left=left, error=reason)
                    return left
                before = left if reason is not None else -1
        except KafkaException as exc:
            self._raise_for(exc.args[0], "flush")
            raise
        except SystemError as exc:
            # confluent-kafka serves the callbacks of a producer that just failed fatally (as
            # fenced ones do) with the error still set, and the first callback raises this.
            # The producer keeps the error: without its traceback it cannot keep the caller's
            # frames (and through them the producer itself) alive.
            # What it says ("<function ...> returned a result with an exception set") names
            # a callback, not the cause: the exception that was set is its ``__cause__``.
            cause = exc.__cause__
            exc.__traceback__ = None
            exc.__cause__ = None
            if isinstance(cause, KafkaException) and isinstance(cause.args[0], KafkaError):
                cause.__traceback__ = None
                raise Fenced(describe(cause.args[0])) from None
            raise Fenced("the producer failed fatally while flushing (fenced)") from None

    def commit(self) -> None:
        """Commit, retrying what librdkafka says may be retried: giving up on a commit whose
        outcome is unknown and aborting could hide records already visible."""
        live = self._live()
        while True:
            try:
                live.commit_transaction(self._timeout_s)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                self._raise_for(error, "commit_transaction")
                if error.txn_requires_abort():
                    self.abort()
                    raise TransactionAborted(describe(error)) from exc
                if not error.retriable() or self._interrupted.is_set():
                    raise
                log.warning("transaction_commit_retry", error=describe(error))

    def abort(self) -> None:
        """Abort the open transaction. ``Fenced`` when Kafka did not answer the abort within
        the transaction timeout: by then Kafka aborts the transaction itself, bumping the
        producer's epoch, so this producer is done whatever comes next (a broker-kill run:
        every member's next answer was ``PRODUCER_FENCED`` or ``INVALID_TXN_STATE``), and
        once its coordinator was away longer than a request's timeout the abort asked again
        reached it 6-8 s after the broker was back, where a new producer starts in
        0.1-0.5 s. Other retriable errors are retried here."""
        # Once interrupted (a stop or a demotion), a short try: the next master's init, or
        # Kafka after the transaction timeout, aborts what is left, and a node that waited the
        # whole timeout on a dead broker outlived its own shutdown.
        wait_s = _INTERRUPTED_ABORT_S if self._interrupted.is_set() else self._timeout_s
        try:
            self._call(self._live().abort_transaction, wait_s, again_after_timeout=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._TIMED_OUT or self._interrupted.is_set():
                raise
            self._lost = (
                f"the abort was not answered in {wait_s:g} s (the transaction timeout): "
                "Kafka aborts the transaction itself"
            )
            raise Fenced(self._lost) from None

    def in_flight(self) -> int:
        return 0 if self._producer is None else len(self._producer)

    def note_error(self, error: KafkaError) -> None:
        """Nothing to heal: a fenced transactional producer ends its master's term."""

    def topic_exists(self, topic: str, timeout_s: float) -> bool:
        return lists_topic(self._live().list_topics(topic, timeout=timeout_s), topic)

    def interrupt(self) -> None:
        """Stop retrying: a call in progress raises instead of retrying a retriable error."""
        self._interrupted.set()

    def close(self) -> None:
        """Release the producer (its threads and connections): a node demoted and promoted
        again must not keep one per term. Never raises: a fenced producer's ``poll`` raises
        its fatal error, and the demotion that closes it must go on."""
        live, self._producer = self._producer, None
        if live is None:
            return
        try:
            live.purge()
            live.poll(0)
        except (KafkaException, SystemError) as exc:
            # The error keeps its traceback, and the traceback this frame: drop it, or the
            # producer (its threads, its connections) stays alive through it.
            exc.__traceback__ = None
            log.info("transactional_producer_closed", error=str(exc))

    def _call(
        self, method: Callable[..., None], *args: Any, again_after_timeout: bool = True
    ) -> None:
        """A transaction API call; retriable failures are retried until interrupted, a
        timeout only while ``again_after_timeout``."""
        while True:
            try:
                method(*args)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                self._raise_for(error, getattr(method, "__name__", "transaction call"))
                if not error.retriable() or self._interrupted.is_set():
                    raise
                if not again_after_timeout and error.code() == KafkaError._TIMED_OUT:
                    raise
                self._interrupted.wait(_RETRY_PAUSE_S)

    @staticmethod
    def _raise_for(error: KafkaError, what: str) -> None:
        """Raise what ``error`` means for this producer as a whole, if anything."""
        kind = classify(error)
        if (
            kind is ErrorKind.AUTHORIZATION
            and error.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED
        ):
            # A target topic chronos may not write concerns that record (dead-lettered);
            # the transactional id or the cluster concerns every transaction.
            raise NotAuthorized(what, error)
        if kind is ErrorKind.FENCED:
            raise Fenced(describe(error))

"""The dead-letter topic: records that can never be delivered, with the reason in a header;
and the one policy that decides when a delivery goes there, for both delivery modes.

What is permanent (``DeadLetterPolicy``), when to give up, and what a dead letter says
(``job_record``, ``dead_letter_headers``, ``shrink``) are decided here once: a node alone's
sender and a master's transaction loop ask the same questions and get the same answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException

from chronos.delivery.job import DeliveryJob
from chronos.delivery.policies import Policies
from chronos.kafka.errors import ErrorKind, classify, describe
from chronos.kafka.publisher import DeliveryCallback, Publisher
from chronos.metrics import Metrics
from chronos.settings import DeliverySettings, backoff_ms
from chronos.types import EpochMs, Headers
from chronos.wire import (
    H_DLQ_REASON,
    H_DLQ_SOURCE,
    H_DLQ_TARGET,
    H_DLQ_TRUNCATED,
    delivery_headers,
)

log = structlog.get_logger(__name__)

#: (key, value, headers, reason, source) of a rejected inner record.
Rejected = tuple[bytes | None, bytes | None, Headers, str, str]


#: What a truncated dead letter keeps of the original: its key and each header up to this size.
KEPT_PART_BYTES = 1024
#: ... and at most this much of the original headers in all.
KEPT_HEADERS_BYTES = 16 * 1024
#: Longest reason kept (a reason quotes what failed, which is not bounded by itself).
REASON_BYTES = 1024


#: The headers chronos puts on a dead letter.
_DLQ_HEADERS = frozenset({H_DLQ_REASON, H_DLQ_SOURCE, H_DLQ_TARGET, H_DLQ_TRUNCATED})


def dead_letter_headers(
    headers: Headers, reason: str, source: str, target: str | None, truncated: str | None
) -> Headers:
    """The record's headers plus why it was dead-lettered, from where, and where it was going.

    chronos' own names appear once: a record header of the same name (an inner record may
    carry any header, e.g. a forged ``chronos-dlq-reason``) is kept as ``user-<name>``, so no
    reader that takes the first or the last header of a name gets the record's instead."""
    own = _DLQ_HEADERS
    headers = [(f"user-{name}" if name in own else name, raw) for name, raw in headers]
    extra: Headers = [
        (H_DLQ_REASON, reason.encode()[:REASON_BYTES]),
        (H_DLQ_SOURCE, source.encode()),
    ]
    if target is not None:
        extra.append((H_DLQ_TARGET, target.encode()))
    if truncated is not None:
        extra.append((H_DLQ_TRUNCATED, truncated.encode()))
    return [*headers, *extra]


def shrink(
    key: bytes | None, value: bytes | None, headers: Headers
) -> tuple[bytes | None, Headers, str]:
    """A form of a record that fits any dead-letter topic: no value, the key and headers only
    when small (:data:`KEPT_PART_BYTES` each, :data:`KEPT_HEADERS_BYTES` in all), and the
    original sizes (``value=V key=K headers=H``, bytes; headers count names and values)."""
    kept: Headers = []
    budget = KEPT_HEADERS_BYTES
    header_bytes = 0
    for name, raw in headers:
        size = len(name.encode()) + len(raw or b"")
        header_bytes += size
        if size <= KEPT_PART_BYTES and size <= budget:
            kept.append((name, raw))
            budget -= size
    key_bytes = len(key or b"")
    sizes = f"value={len(value or b'')} key={key_bytes} headers={header_bytes}"
    return (key if key_bytes <= KEPT_PART_BYTES else None), kept, sizes


def job_record(
    job: DeliveryJob,
) -> tuple[bytes | None, bytes | None, Headers, str, str | None]:
    """(key, value, headers, source, target) of a delivery job's dead letter: the record as it
    would have been delivered, or the raw stored bytes of one that could not be decoded."""
    message = job.message
    if message is None:
        return None, job.raw, [], "store:" + job.key.hex(), None
    headers = delivery_headers(message, job.due_ms, job.skipped)
    return message.key, message.value, headers, "delivery", message.topic


#: How long a topic found missing stays missing before Kafka is asked again.
UNKNOWN_TOPIC_RECHECK_S = 1.0
#: How long after a first "no such topic" Kafka is asked again before that is believed: a
#: cluster that creates topics on demand (Apache Kafka's default, Tansu) creates one when a
#: producer first asks for it, and Kafka answers that first question "unknown" (measured:
#: there 0.5 s later).
UNKNOWN_TOPIC_CONFIRM_S = 1.0
#: Longest wait for Kafka's metadata about a target topic.
TOPIC_CHECK_TIMEOUT_S = 5.0
#: The reason given for a stored message that does not decode.
UNDECODABLE = "undecodable stored message"


class _NotYet:
    """The target topic was unknown at a first look: try the job again after
    :data:`UNKNOWN_TOPIC_CONFIRM_S`, without counting an attempt."""

    def __repr__(self) -> str:
        return "NOT_YET"


#: What ``DeadLetterPolicy.reason_before`` says while a missing topic is not confirmed.
NOT_YET = _NotYet()


@dataclass(frozen=True, slots=True)
class TopicMissing:
    """What ``DeadLetterPolicy.reason_before`` says of a target topic Kafka confirmed missing
    when the topic's policy retries: a failed attempt (``error``), which ``reason_after``
    weighs as any other (someone may create the topic within the policy's budget)."""

    error: KafkaError


#: What ``DeadLetterPolicy.reason_before`` says of a job before it is tried: the reason it
#: goes to the dead-letter topic, :data:`NOT_YET`, a :class:`TopicMissing` failure, or None
#: (try it).
Before = str | _NotYet | TopicMissing | None

#: Errors that say the target topic does not exist.
_MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


class Refusal(Enum):
    """What to do when the dead-letter topic refused a dead letter."""

    #: Send it again in its ``shrink`` form, which any topic takes.
    SHRINK = "shrink"
    #: Try again later: nothing passes the seek without an acknowledgement.
    RETRY = "retry"
    #: chronos may not write its own dead-letter topic: the node cannot go on.
    FATAL = "fatal"


def when_dead_letter_refused(error: KafkaError, truncated: bool) -> Refusal:
    """The dead-letter topic refused a dead letter (``truncated``: its shrunk form)."""
    kind = classify(error)
    if kind is ErrorKind.AUTHORIZATION:
        return Refusal.FATAL
    if kind is ErrorKind.RECORD and not truncated:
        return Refusal.SHRINK
    return Refusal.RETRY


class DeadLetterPolicy:
    """When a delivery goes to the dead-letter topic instead of its target (both modes).

    * Before producing: a stored message that does not decode; a target topic Kafka's
      metadata says does not exist, twice, :data:`UNKNOWN_TOPIC_CONFIRM_S` apart (a cluster
      that creates topics on demand creates it at the first question; until the second the
      answer is :data:`NOT_YET`), and then asked again at most every
      :data:`UNKNOWN_TOPIC_RECHECK_S`. Without this check librdkafka would hold the record for
      its whole metadata timeout (30 s): in a transaction the commit too, for a node alone its
      seek.
    * After an error (``errors.classify``): a ``RECORD`` error at once; ``OUTAGE`` and
      ``FENCED`` never (they say nothing about the record: retried for as long as they last).
      ``AUTHORIZATION`` on the target topic and ``OTHER`` follow the topic's retry policy
      (``delivery.topics``): retried with its backoff until its ``max_attempts`` or its
      ``max_age_s`` past the due time run out. A topic without a policy dead-letters
      ``AUTHORIZATION`` at once and ``OTHER`` once ``give_up_after_s`` have passed since the
      first attempt.

    Parameters:
        settings: ``delivery`` (``give_up_after_s``, the default backoff, ``topics``).
        topic_exists: asks Kafka whether a topic exists (``Publisher.topic_exists``); may raise
            ``KafkaException`` when Kafka does not answer (then the topic counts as existing).
        policies: each topic's policy now (configured or set live); None: ``settings.topics``.
        unwritable: asks Kafka which of some topics chronos may not write
            (``kafka.admin.unwritable_topics``); a master asks it after a transaction came
            back purged, where the refused topic is not named.
        monotonic: seconds of a monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        settings: DeliverySettings,
        topic_exists: Callable[[str], bool],
        monotonic: Callable[[], float] = time.monotonic,
        unwritable: Callable[[Collection[str]], set[str]] | None = None,
        policies: Policies | None = None,
    ) -> None:
        self._settings = settings
        self._policies = policies or Policies(settings.topics)
        self._unwritable = unwritable
        self._give_up_ms = settings.give_up_after_s * 1000
        self._topic_exists = topic_exists
        self._now = monotonic
        self._known: set[str] = set()
        #: Topics found missing once, when (not believed yet).
        self._unconfirmed: dict[str, float] = {}
        #: Topics found missing twice, when last asked.
        self._missing: dict[str, float] = {}

    @classmethod
    def of(
        cls,
        settings: DeliverySettings,
        publisher: Publisher,
        unwritable: Callable[[Collection[str]], set[str]] | None = None,
        policies: Policies | None = None,
    ) -> DeadLetterPolicy:
        """The policy, asking ``publisher`` about topics."""
        return cls(
            settings,
            lambda t: publisher.topic_exists(t, TOPIC_CHECK_TIMEOUT_S),
            unwritable=unwritable,
            policies=policies,
        )

    def unwritable(self, topics: Collection[str]) -> set[str] | None:
        """Which of ``topics`` Kafka says chronos may not write; None when Kafka did not
        answer (an outage, which the caller retries as one), none when nobody can tell."""
        if self._unwritable is None or not topics:
            return set()
        try:
            return self._unwritable(topics)
        except KafkaException as exc:
            log.info("topic_rights_unknown", error=str(exc))
            return None

    def reason_before(self, job: DeliveryJob) -> Before:
        """Why ``job`` goes to the dead-letter topic without being tried; None to try it;
        :data:`NOT_YET` to try it again after :data:`UNKNOWN_TOPIC_CONFIRM_S`; a
        :class:`TopicMissing` failure when its topic is missing and its policy retries."""
        if job.dead_reason is not None:
            return job.dead_reason
        message = job.message
        if message is None:
            return UNDECODABLE
        topic = message.topic
        if topic in self._known:
            return None
        return self._topic_missing(topic)

    def _topic_missing(self, topic: str) -> Before:
        now = self._now()
        checked = self._missing.get(topic)
        if checked is not None and now - checked <= UNKNOWN_TOPIC_RECHECK_S:
            return self._missing_now(topic)
        first = self._unconfirmed.get(topic)
        if first is not None and now - first < UNKNOWN_TOPIC_CONFIRM_S:
            return NOT_YET
        try:
            exists = self._topic_exists(topic)
        except KafkaException:
            return None  # Kafka did not answer: produce, and let the outcome decide
        if exists:
            self._known.add(topic)
            self._missing.pop(topic, None)
            self._unconfirmed.pop(topic, None)
            return None
        if checked is None and first is None:
            self._unconfirmed[topic] = now
            return NOT_YET
        self._unconfirmed.pop(topic, None)
        self._missing[topic] = now
        return self._missing_now(topic)

    def _missing_now(self, topic: str) -> str | TopicMissing:
        missing = f"UNKNOWN_TOPIC_OR_PART: topic {topic} does not exist"
        if self._retries(topic):
            return TopicMissing(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, missing))
        return missing

    def _retries(self, topic: str | None) -> bool:
        """Whether ``topic``'s policy says how to retry."""
        policy = None if topic is None else self._policies.policy_of(topic)
        return policy is not None and policy.retries

    def reason_after(self, error: KafkaError, failure: Failure) -> str | None:
        """Why a delivery that failed with ``error`` goes to the dead-letter topic now, or None
        to retry it (after ``retry_delay_ms``)."""
        kind = classify(error)
        if kind is ErrorKind.RECORD and not (
            error.code() in _MISSING and self._retries(failure.topic)
        ):
            return describe(error)
        if kind in (ErrorKind.OUTAGE, ErrorKind.FENCED):
            return None
        attempts, now_ms = failure.attempts, failure.now_ms
        policy = None if failure.topic is None else self._policies.policy_of(failure.topic)
        if policy is None or not policy.retries:
            if kind is ErrorKind.AUTHORIZATION:
                return describe(error)
        elif policy.max_attempts is not None and attempts >= policy.max_attempts:
            return f"gave up after {attempts} attempts (max_attempts): {describe(error)}"
        elif policy.max_age_s is not None:
            age_ms = now_ms - failure.due_ms
            if age_ms > policy.max_age_s * 1000:
                return (
                    f"gave up after {attempts} attempts, {age_ms} ms past its due time "
                    f"(max_age_s {policy.max_age_s:g}): {describe(error)}"
                )
            return None
        if now_ms - failure.first_attempt_ms > self._give_up_ms:
            return f"gave up after {attempts} attempts: {describe(error)}"
        return None

    def retry_delay_ms(self, topic: str | None, attempts: int) -> int:
        """How long to wait after the ``attempts``-th failed attempt of a delivery to
        ``topic``: its policy's backoff, or ``delivery.retry_backoff_*``."""
        policy = None if topic is None else self._policies.policy_of(topic)
        if policy is not None and policy.retries:
            return policy.backoff_ms(attempts)
        settings = self._settings
        return backoff_ms(
            settings.retry_backoff_initial_ms, settings.retry_backoff_max_ms, attempts
        )


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt of a delivery, as the policy weighs it.

    Parameters:
        topic: the target topic (None: the stored message did not decode).
        due_ms: the delivered occurrence's due time (``max_age_s`` counts from it).
        first_attempt_ms: when the first attempt was made (``give_up_after_s`` counts from it).
        attempts: failed attempts so far, this one included.
        now_ms: now.
    """

    topic: str | None
    due_ms: EpochMs
    first_attempt_ms: EpochMs
    attempts: int
    now_ms: EpochMs


class DeadLetters:
    """Produces to the dead-letter topic. One attempt per call: callers own the retries, so no
    produce ever runs inside a delivery callback and no thread is spawned per failure.

    A record the dead-letter topic refuses permanently (too large, most likely) is sent again
    in the form :func:`shrink` gives, which any topic takes, with ``chronos-dlq-truncated``
    giving the original sizes: the evidence survives and the dead letter always fits.

    Parameters:
        publisher: the shared idempotent publisher.
        topic: the dead-letter topic name.
        metrics: counts dead letters.
        on_fatal: told when chronos may not write its dead-letter topic (``Refusal.FATAL``).
    """

    def __init__(
        self,
        publisher: Publisher,
        topic: str,
        metrics: Metrics,
        on_fatal: Callable[[str], None] | None = None,
    ) -> None:
        self._publisher = publisher
        self._topic = topic
        self._metrics = metrics
        self._on_fatal = on_fatal

    def refused(self, error: KafkaError, truncated: bool) -> Refusal:
        """What to do about a refused dead letter; reports a fatal refusal."""
        refusal = when_dead_letter_refused(error, truncated)
        if refusal is Refusal.FATAL and self._on_fatal is not None:
            self._on_fatal(
                f"Kafka refused writing the dead-letter topic {self._topic}: {describe(error)}"
            )
        return refusal

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        *,
        reason: str,
        source: str,
        target: str | None,
        truncate: bool,
        on_result: DeliveryCallback,
    ) -> None:
        """Dead-letter one record (in its :func:`shrink` form when ``truncate``)."""
        truncated: str | None = None
        if truncate:
            key, headers, truncated = shrink(key, value, headers)
            value = None
        self._publisher.publish(
            self._topic,
            key,
            value,
            dead_letter_headers(headers, reason, source, target, truncated),
            self._counted(on_result, truncate),
        )

    def _counted(self, on_result: DeliveryCallback, truncated: bool) -> DeliveryCallback:
        def done(error: KafkaError | None, message: Any = None) -> None:
            if error is None:
                self._metrics.incr("dead_lettered")
            elif when_dead_letter_refused(error, truncated) is Refusal.SHRINK:
                # Too large for the dead-letter topic: its caller sends it again shrunk
                # (``shrink``), which is what goes out; no failure yet.
                self._metrics.incr("dead_letters_shrunk")
                log.info("dead_letter_too_large", error=describe(error), then="sent shrunk")
            else:
                self._publisher.note_error(error)
                log.error("dead_letter_failed", error=describe(error))
            on_result(error, message)

        return done

    def send_and_wait(
        self, records: list[Rejected], timeout_s: float, acknowledged: set[str] | None = None
    ) -> bool:
        """Dead-letter rejected inner records; True once every one is acknowledged.

        Records refused permanently are tried once more in their :func:`shrink` form. The
        source of each acknowledged record is added to ``acknowledged``, and records whose
        source is in it are not sent: a caller that retries a batch passes the same set, so no
        dead letter is sent twice.
        """
        if acknowledged is not None:
            records = [record for record in records if record[4] not in acknowledged]
        pending = [(record, False) for record in records]
        deadline = time.monotonic() + timeout_s
        while pending:
            results = _Results(len(pending))
            for index, ((key, value, headers, reason, source), truncate) in enumerate(pending):
                self.send(
                    key,
                    value,
                    headers,
                    reason=reason,
                    source=source,
                    target=None,
                    truncate=truncate,
                    on_result=results.callback(index),
                )
            if not results.wait(deadline - time.monotonic()):
                return False
            errors = results.errors
            if acknowledged is not None:
                acknowledged.update(
                    record[4]
                    for (record, _truncate), error in zip(pending, errors, strict=True)
                    if error is None
                )
            retry = [
                (record, True)
                for (record, truncate), error in zip(pending, errors, strict=True)
                if error is not None and self.refused(error, truncate) is Refusal.SHRINK
            ]
            if len(retry) != sum(error is not None for error in errors):
                return False  # a transient failure, or a truncated record refused again
            pending = retry
        return True


class _Results:
    """Collects the outcome of ``count`` sends."""

    def __init__(self, count: int) -> None:
        self.errors: list[KafkaError | None] = [None] * count
        self._remaining = count
        self._lock = threading.Lock()
        self._done = threading.Event()
        if count == 0:
            self._done.set()

    def callback(self, index: int) -> DeliveryCallback:
        def done(error: KafkaError | None, _message: Any = None) -> None:
            with self._lock:
                self.errors[index] = error
                self._remaining -= 1
                if self._remaining == 0:
                    self._done.set()

        return done

    def wait(self, timeout_s: float) -> bool:
        return self._done.wait(max(0.0, timeout_s))

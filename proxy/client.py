"""Python client: validates a delay request and returns once Kafka acknowledged it (durable)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError

from chronos import wire
from chronos.clock import Clock, SystemClock, ceil_ms
from chronos.errors import NotAcknowledged, ValidationError
from chronos.kafka.clients import KafkaClients
from chronos.kafka.errors import describe
from chronos.kafka.publishers.idempotent import IdempotentPublisher
from chronos.model import DelayMessage
from chronos.repeat import Repeat
from chronos.settings import ANY_TOPIC, ChronosSettings, TopicPolicy
from chronos.types import EpochMs, Headers
from chronos.validation import (
    first_due_for,
    resolve_due,
    validate_id,
    validate_message,
    validate_reschedule,
    validate_topic,
)
from proxy.status import StatusSource
from proxy.sticky_ids import StickyIds

#: ``client.id`` of the client library's and the proxy's Kafka clients.
CLIENT_ID = "chronos-client"

#: How long one answer of Kafka stands for its health (``DelayClient.healthy``).
HEALTH_TTL_MS = 1000
#: Longest wait for the inner topic's partition count, and how often it is looked up again
#: (after an acknowledged publish: partitions added to the inner topic).
_PARTITIONS_TIMEOUT_S = 1.0
_RECOUNT_S = 30.0

HeaderInput = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]


@dataclass(frozen=True, slots=True)
class Receipt:
    """Kafka acknowledged the request: the message ``id`` will be delivered at ``deliver_at_ms``."""

    id: str
    deliver_at_ms: EpochMs

    @property
    def deliver_at(self) -> datetime:
        """Due time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.deliver_at_ms / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class CancelReceipt:
    """Kafka acknowledged the cancel. The node applies it in order after the add; a message
    already handed to Kafka by then is not recalled (the node logs ``cancel_too_late``)."""

    id: str


@dataclass(frozen=True, slots=True)
class RescheduleReceipt:
    """Kafka acknowledged the reschedule. The node that delivers applies it in order after the
    add: a message still pending moves to ``deliver_at_ms``; one already handed to Kafka is not
    moved (the node logs ``reschedule_too_late``). ``status`` shows which."""

    id: str
    deliver_at_ms: EpochMs


@dataclass(slots=True)
class DelayRequest:
    """One request of a batch; same meaning as ``DelayClient.send_delay``'s arguments."""

    topic: str
    value: bytes | str | None
    key: bytes | str | None = None
    headers: HeaderInput | None = None
    delay: timedelta | float | None = None
    deliver_at: datetime | int | None = None
    id: str | None = None
    repeat: Repeat | None = None


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _headers(headers: HeaderInput | None) -> Headers:
    if headers is None:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(str(name), _bytes(value)) for name, value in items]


def _delay_ms(delay: timedelta | float | None) -> int | None:
    if delay is None:
        return None
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    return round(seconds * 1000)


def _deliver_at_ms(deliver_at: datetime | int | None) -> int | None:
    if deliver_at is None or isinstance(deliver_at, int):
        return deliver_at
    if deliver_at.tzinfo is None:
        raise ValidationError("deliver_at", "must be timezone-aware (e.g. UTC)")
    return ceil_ms(deliver_at)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A validated request as its inner-topic record, and what a token's limits charge it.

    Plain data (it crosses a process boundary: the proxy validates large bodies in a child,
    ``proxy/http/lane.py``).
    """

    id: str
    topic: str
    deliver_at_ms: EpochMs
    #: When it stops being pending: its (last occurrence's) due time.
    last_due_ms: EpochMs
    #: The deliveries it can make: 1, or a repeat's ``times`` (issue 62: quotas charge them).
    deliveries: int
    record: tuple[bytes, bytes | None, Headers]

    @classmethod
    def of(cls, message: DelayMessage) -> Prepared:
        repeat, first = message.repeat, message.first_due_ms
        return cls(
            id=message.id,
            topic=message.topic,
            deliver_at_ms=first,
            last_due_ms=first if repeat is None else repeat.last_due(first),
            deliveries=1 if repeat is None else repeat.times,
            record=wire.encode_add(message),
        )


class _Acks:
    """Waits for the acknowledgements of several records at once."""

    def __init__(self, expected: int, on_error: Callable[[KafkaError], None]) -> None:
        self._on_error = on_error
        self._remaining = expected
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.errors: list[KafkaError] = []
        if expected == 0:
            self._done.set()

    def __call__(self, error: KafkaError | None, _msg: object = None) -> None:
        if error is not None:
            self._on_error(error)  # a producer fenced for good is replaced for the next call
        with self._lock:
            if error is not None:
                self.errors.append(error)
            self._remaining -= 1
            if self._remaining == 0:
                self._done.set()

    def wait(self, timeout_s: float) -> None:
        """Return once every record is acknowledged; else raise why not.

        The producer gives up after the same time (``message.timeout.ms``, see
        ``DelayClient._publisher``), so either timer may end the wait first: the producer's
        ``_MSG_TIMED_OUT`` is the same unknown outcome as this wait's timeout, not a refusal.
        A record Kafka did refuse is reported before those."""
        finished = self._done.wait(timeout_s)
        with self._lock:
            errors = list(self.errors)
        refused = [e for e in errors if e.code() != KafkaError._MSG_TIMED_OUT]
        if not refused and (not finished or errors):
            raise NotAcknowledged(
                f"Kafka did not acknowledge within {timeout_s} s; the outcome is unknown: "
                "retry with the same id (ids make scheduling idempotent)"
            )
        if refused:
            error = refused[0]
            if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise ValidationError(
                    "value", f"Kafka refused the size: {describe(error)}", status=413
                )
            raise NotAcknowledged(
                f"Kafka refused {len(refused)} record(s): {describe(error)}; others of the "
                "same call may have been accepted: retry with the same ids"
            )


class DelayClient:
    """Schedules delay messages by producing them to the inner topic.

    Every call returns only after Kafka acknowledged the inner record (acks=all, idempotent
    producer), so an answered request survives any node crash.

    Parameters:
        settings: the settings tree (Kafka connection, limits, topic namespace).
        clock: time source for relative delays.
    """

    def __init__(self, settings: ChronosSettings | None = None, clock: Clock | None = None) -> None:
        self._settings = settings or ChronosSettings()
        self._clock = clock or SystemClock()
        self._names = self._settings.topics.names
        self._publisher_lock = threading.Lock()
        self._started: IdempotentPublisher | None = None
        self._timeout_s = self._settings.proxy.ack_timeout_s
        #: Whether the policy topic was made sure of (compacted; ``set_policy``).
        self._policy_topic_ready = False
        #: When Kafka was last asked whether it answers, and what it said (``healthy``).
        self._health: tuple[EpochMs | None, bool] = (None, False)
        self._health_lock = threading.Lock()
        #: The inner topic's partition count, and when it was looked up (``_count_inner``).
        self._inner_count: int | None = None
        self._counted_at: float | None = None
        self._ids = StickyIds(self._inner_partitions, self._settings.proxy.sticky_ids_ms)

    def __enter__(self) -> DelayClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush and stop the producer."""
        with self._publisher_lock:
            if self._started is not None:
                self._started.stop()
                self._started.join(5.0)
                self._started = None

    @property
    def _publisher(self) -> IdempotentPublisher:
        """The producer, started on first use (constructing a client never connects)."""
        with self._publisher_lock:
            if self._started is None:
                # librdkafka gives up no later than the caller does, so a timed-out request is
                # not delivered minutes later behind the caller's back.
                timeout_ms = int(self._timeout_s * 1000)
                clients = KafkaClients(
                    self._settings.kafka, CLIENT_ID, self._settings.limits.max_message_bytes
                )
                publisher = clients.idempotent("requests", {"message.timeout.ms": timeout_ms})
                publisher.start()
                self._started = publisher
            return self._started

    def new_id(self, prefix: str = "") -> str:
        """A fresh message id, ``prefix`` in front, landing in the inner partition this client
        sticks to for ``proxy.sticky_ids_ms`` (``proxy/sticky_ids.py``: fewer, larger batches
        per partition for the broker)."""
        return self._ids.new(prefix)

    def _inner_partitions(self) -> int | None:
        """The inner topic's partition count as last looked up (None: not yet), read
        without asking Kafka: ids are made while validating, which never connects."""
        return self._inner_count

    def _count_inner(self, publisher: IdempotentPublisher) -> None:
        """After Kafka acknowledged a publish (so it answers now): look the inner topic's
        partition count up, at most every ``_RECOUNT_S``."""
        now = time.monotonic()
        if self._counted_at is not None and now - self._counted_at < _RECOUNT_S:
            return
        self._counted_at = now
        count = publisher.partitions(self._names.inner, _PARTITIONS_TIMEOUT_S)
        if count is not None:
            self._inner_count = count

    def status(self, id: str) -> dict[str, Any]:
        """Where message ``id`` is: pending, delivered (partition, offset), dead_lettered,
        cancelled (and what the cancel found) or unknown, as a ready node of
        ``proxy.status_nodes`` answers (``proxy/status.py``). Raises StatusUnavailable when
        none can. After ``cancel``, this tells whether the cancel removed the message."""
        validate_id(id, self._settings.limits)  # a malformed id is the caller's error, not a 503
        proxy = self._settings.proxy
        token = None if proxy.status_token is None else proxy.status_token.get_secret_value()
        return StatusSource(proxy.status_nodes, token=token).status(id)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when Kafka answered a metadata request within the last ``HEALTH_TTL_MS``:
        probes coming faster share one request (issue 62: each ``/healthz`` asked Kafka, so a
        busy broker made every probe as slow as it, and a probe flood was a metadata flood)."""
        with self._health_lock:
            checked_at, healthy = self._health
            now = self._clock.now_ms()
            if checked_at is None or not 0 <= now - checked_at < HEALTH_TTL_MS:
                healthy = self._publisher.ping(timeout_s)
                self._health = (self._clock.now_ms(), healthy)
            return healthy

    def build(self, request: DelayRequest) -> DelayMessage:
        """Validate a request into the message that will be scheduled (raises ValidationError)."""
        now = self._clock.now_ms()
        due = resolve_due(
            now, delay_ms=_delay_ms(request.delay), deliver_at_ms=_deliver_at_ms(request.deliver_at)
        )
        message = DelayMessage(
            id=request.id if request.id is not None else self.new_id(),
            topic=request.topic,
            key=_bytes(request.key),
            value=_bytes(request.value),
            headers=_headers(request.headers),
            first_due_ms=first_due_for(request.repeat, due),
            repeat=request.repeat,
        )
        validate_message(message, self._settings.limits, self._names, now)
        return message

    def send_delay(
        self,
        topic: str,
        value: bytes | str | None,
        *,
        key: bytes | str | None = None,
        headers: HeaderInput | None = None,
        delay: timedelta | float | None = None,
        deliver_at: datetime | int | None = None,
        id: str | None = None,
        repeat: Repeat | None = None,
    ) -> Receipt:
        """Schedule ``value`` for ``topic`` after ``delay`` (seconds or timedelta) or at
        ``deliver_at`` (aware datetime or epoch ms). A caller-given ``id`` makes the call
        idempotent: re-sending it schedules one delivery."""
        request = DelayRequest(topic, value, key, headers, delay, deliver_at, id, repeat)
        return self.send_batch([request])[0]

    def send_batch(self, requests: Sequence[DelayRequest]) -> list[Receipt]:
        """Validate all requests first (all or nothing), produce them, wait for every ack."""
        return self.publish(self.prepare(requests))

    def prepare(
        self, requests: Sequence[DelayRequest], within: Callable[[], None] | None = None
    ) -> list[Prepared]:
        """Validate every request (all or nothing) into its inner record, producing nothing:
        ``publish`` sends them. ``within`` is called after each request (the proxy's CPU
        budget raises from it)."""
        prepared: list[Prepared] = []
        for index, request in enumerate(requests):
            try:
                prepared.append(Prepared.of(self.build(request)))
            except ValidationError as exc:
                field_name = f"messages[{index}].{exc.field}" if len(requests) > 1 else exc.field
                raise ValidationError(field_name, exc.message, status=exc.status) from exc
            if within is not None:
                within()
        return prepared

    def publish(self, prepared: Sequence[Prepared]) -> list[Receipt]:
        """Produce prepared requests to the inner topic; return once Kafka acknowledged all."""
        acks = _Acks(len(prepared), self._publisher.note_error)
        for one in prepared:
            self._publisher.publish(self._names.inner, *one.record, acks)
        acks.wait(self._timeout_s)
        self._count_inner(self._publisher)
        return [Receipt(p.id, p.deliver_at_ms) for p in prepared]

    def cancel(self, id: str) -> CancelReceipt:
        """Cancel every remaining occurrence of message ``id``."""
        return self.cancel_batch([id])[0]

    def cancel_batch(self, ids: Sequence[str]) -> list[CancelReceipt]:
        """Cancel several messages; validated all or nothing, answered after every ack."""
        for index, message_id in enumerate(ids):
            try:
                validate_id(message_id, self._settings.limits)
            except ValidationError as exc:
                field_name = f"ids[{index}]" if len(ids) > 1 else exc.field
                raise ValidationError(field_name, exc.message) from exc
        acks = _Acks(len(ids), self._publisher.note_error)
        for message_id in ids:
            key, value, headers = wire.encode_cancel(message_id)
            self._publisher.publish(self._names.inner, key, value, headers, acks)
        acks.wait(self._timeout_s)
        return [CancelReceipt(message_id) for message_id in ids]

    def set_policy(self, topic: str, policy: TopicPolicy | None) -> None:
        """Replace the delivery policy of ``topic`` (``"*"``: every topic without its own) on
        every node, live; None brings its configured one back. Returns once Kafka acknowledged
        the record of the policy topic, which each node applies as it reads it
        (``node/policy_follower.py``)."""
        from chronos.delivery.policies import encode
        from chronos.kafka.admin import ensure_policy_topic

        if topic != ANY_TOPIC:
            validate_topic(topic, self._names)
        if not self._policy_topic_ready:
            ensure_policy_topic(self._settings, self._timeout_s)
            self._policy_topic_ready = True
        acks = _Acks(1, self._publisher.note_error)
        value = None if policy is None else encode(policy)
        self._publisher.publish(self._names.policy, topic.encode(), value, [], acks)
        acks.wait(self._timeout_s)

    def reschedule(
        self,
        id: str,
        *,
        delay: timedelta | float | None = None,
        deliver_at: datetime | int | None = None,
    ) -> RescheduleReceipt:
        """Move the pending occurrence of message ``id`` to ``delay`` from now or to
        ``deliver_at``: of a repeat, that occurrence alone, delivered then with that
        ``chronos-due-ms``; the later ones stay where the repeat's schedule puts them, those at
        or before the new time passed over (docs/using.md, Reschedule). Through the inner
        topic, so every replica applies it in the same order as the add and any cancel; the
        node that delivers decides whether it came too late (``status`` then shows the due
        time the message has)."""
        now = self._clock.now_ms()
        due = resolve_due(now, delay_ms=_delay_ms(delay), deliver_at_ms=_deliver_at_ms(deliver_at))
        validate_reschedule(id, due, self._settings.limits, now)
        acks = _Acks(1, self._publisher.note_error)
        key, value, headers = wire.encode_reschedule(id, due)
        self._publisher.publish(self._names.inner, key, value, headers, acks)
        acks.wait(self._timeout_s)
        return RescheduleReceipt(id, due)

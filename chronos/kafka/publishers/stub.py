"""An in-memory publisher for tests: what dramatiq's ``StubBroker`` is to its brokers.

It implements both seams (``Publisher`` and ``TransactionalPublisher``) without Kafka, and lets
the test decide everything Kafka would: each record's outcome (``outcome``), when outcomes
arrive (``answer``, or ``flush``), records left unanswered (``hold``), a fencing or an
authorization failure at any call (``fail_next``). Transactional records become visible
(``visible``) only when their transaction commits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError

from chronos.kafka.errors import Fenced, TransactionAborted
from chronos.kafka.publisher import ANY_PARTITION, DeliveryCallback
from chronos.types import Headers


@dataclass(eq=False)
class StubRecord:
    """One published record and what became of it."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    on_done: DeliveryCallback
    #: The transaction it was published in (0: none).
    transaction: int = 0
    answered: bool = False
    error: KafkaError | None = None
    #: The partition it was produced to (None: the partitioner's choice).
    partition: int | None = None

    def header(self, name: str) -> bytes | None:
        """The first header called ``name``."""
        return next((v for n, v in self.headers if n == name), None)


@dataclass(frozen=True)
class StubPlace:
    """Where Kafka placed an acknowledged record, as its delivery report's message says."""

    at_partition: int
    at_offset: int

    def partition(self) -> int:
        return self.at_partition

    def offset(self) -> int:
        return self.at_offset


@dataclass
class StubPublisher:
    """Records in memory; outcomes come from ``outcome`` (None: acknowledged).

    Parameters:
        outcome: the error Kafka would answer a record with, or None for an acknowledgement.
        topics: the topics ``topic_exists`` knows (None: every topic).
        auto: answer each record as it is published (else at ``flush`` or ``answer``).
        at_once: the error ``produce()`` itself would refuse a record with (librdkafka does
            for some, e.g. too large): answered inside ``publish``, never part of a transaction.
        placed: acknowledge with a place (partition 0, the record's index among its topic's
            records) instead of no message.
    """

    outcome: Callable[[StubRecord], KafkaError | None] = lambda _record: None
    topics: set[str] | None = None
    auto: bool = False
    at_once: Callable[[StubRecord], KafkaError | None] = lambda _record: None
    placed: bool = False
    #: Every record published, in order.
    published: list[StubRecord] = field(default_factory=list)
    #: Records of committed transactions (and acknowledged ones outside transactions).
    visible: list[StubRecord] = field(default_factory=list)
    #: "init", "begin", "commit", "abort" and "close", in the order they were called.
    calls: list[str] = field(default_factory=list)
    #: Records a flush leaves unanswered (as if Kafka never answered in time).
    hold: Callable[[StubRecord], bool] = lambda _record: False
    noted: list[KafkaError] = field(default_factory=list)
    #: The topics ``topic_exists`` was asked about, in order.
    asked: list[str] = field(default_factory=list)
    name: str = "stub"
    #: "started" while between ``start`` and ``stop`` (as a component), else "stopped".
    state: str = "stopped"
    _fail: dict[str, BaseException] = field(default_factory=dict)
    _transaction: int = 0
    _open: bool = False
    closed: bool = False

    def start(self) -> None:
        self.state = "started"

    def stop(self) -> None:
        self.state = "stopped"

    def join(self, timeout: float) -> None:
        pass

    def is_alive(self) -> bool:
        return self.state == "started"

    def fail_next(self, call: str, error: BaseException) -> None:
        """Make the next ``call`` ("init", "begin", "publish", "flush", "commit", "abort",
        "close") raise ``error``; ``Fenced`` also makes every later call raise it."""
        self._fail[call] = error

    def _check(self, call: str) -> None:
        if self.closed:
            raise Fenced("closed")
        error = self._fail.get(call)
        if error is not None:
            if not isinstance(error, Fenced):
                del self._fail[call]
            else:
                for other in ("init", "begin", "publish", "flush", "commit", "abort"):
                    self._fail.setdefault(other, error)
            raise error

    # -- Publisher ---------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_done: DeliveryCallback,
        partition: int = ANY_PARTITION,
    ) -> None:
        self._check("publish")
        record = StubRecord(topic, key, value, list(headers), on_done, self._transaction)
        if partition != ANY_PARTITION:
            record.partition = partition
        self.published.append(record)
        refused = self.at_once(record)
        if refused is not None:
            record.transaction, record.answered, record.error = 0, True, refused
            on_done(refused, None)
            return
        if self.auto:
            self.answer(record, self.outcome(record))

    def answer(self, record: StubRecord | None = None, error: KafkaError | None = None) -> None:
        """Deliver the outcome of ``record`` (given ``error``), or of every unanswered record
        (from ``outcome``), now."""
        records = [record] if record is not None else self.unanswered()
        for r in records:
            outcome = error if record is not None else self.outcome(r)
            r.answered, r.error = True, outcome
            if outcome is None and not r.transaction:
                self.visible.append(r)
            r.on_done(outcome, self._place(r) if outcome is None and self.placed else None)

    def _place(self, record: StubRecord) -> StubPlace:
        same_topic = [r for r in self.published if r.topic == record.topic]
        return StubPlace(0, same_topic.index(record))

    def unanswered(self) -> list[StubRecord]:
        return [r for r in self.published if not r.answered]

    def flush(self, timeout_s: float) -> int:
        self._check("flush")
        self.answer_all_but_held()
        return len(self.unanswered())

    def answer_all_but_held(self) -> None:
        for r in self.unanswered():
            if not self.hold(r):
                self.answer(r, self.outcome(r))

    def in_flight(self) -> int:
        return len(self.unanswered())

    def note_error(self, error: KafkaError) -> None:
        self.noted.append(error)

    def topic_exists(self, topic: str, timeout_s: float) -> bool:
        self.asked.append(topic)
        return self.topics is None or topic in self.topics

    # -- TransactionalPublisher --------------------------------------------------------------

    def init(self, timeout_s: float) -> None:
        self._check("init")
        self.calls.append("init")

    def begin(self) -> None:
        self._check("begin")
        if self._open:
            raise AssertionError("begin() inside an open transaction")
        self._transaction += 1
        self._open = True
        self.calls.append("begin")

    def commit(self) -> None:
        try:
            self._check("commit")
        except TransactionAborted:
            self.abort()  # as the driver does before it raises this
            raise
        if not self._open:
            raise AssertionError("commit() without a transaction")
        mine = [r for r in self.published if r.transaction == self._transaction]
        if any(not r.answered or r.error is not None for r in mine):
            raise AssertionError("commit() with records unanswered or failed")
        self.visible += mine
        self._open = False
        self.calls.append("commit")

    def abort(self) -> None:
        self._check("abort")
        for r in self.unanswered():
            if r.transaction == self._transaction:
                r.answered = True
        self._open = False
        self.calls.append("abort")

    def interrupt(self) -> None:
        """Nothing retries here."""

    def close(self) -> None:
        self.calls.append("close")
        error = self._fail.pop("close", None)
        self.closed = True
        if error is not None:
            raise error

    @property
    def in_transaction(self) -> bool:
        return self._open

    def visible_on(self, topic: str) -> list[StubRecord]:
        """What a ``read_committed`` consumer of ``topic`` would see, in order."""
        return [r for r in self.visible if r.topic == topic]

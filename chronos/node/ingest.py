"""Ingest: consume the inner topic and write batches, with their offsets, to the store."""

from __future__ import annotations

import logging
import threading
from typing import cast

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from chronos import wire
from chronos.clock import Clock
from chronos.errors import DecodeError, ValidationError
from chronos.metrics import Metrics
from chronos.model import DelayMessage, InnerRequest
from chronos.names import TopicNames
from chronos.node.component import LoopWorker
from chronos.node.deadletter import DeadLetters
from chronos.node.ledger import ApplyOutcome, Ledger
from chronos.settings import LimitSettings
from chronos.store import codec
from chronos.types import Headers, KafkaConfig
from chronos.validation import validate_message

log = structlog.get_logger(__name__)
_librdkafka_log = logging.getLogger("librdkafka")

_DEAD_LETTER_TIMEOUT_S = 30.0
# The proxy checked the horizon with its own clock; a node whose clock is a little behind must
# not dead-letter what the proxy accepted.
_HORIZON_SLACK_MS = 3_600_000


def decode_record(
    record: Message, limits: LimitSettings, names: TopicNames, now_ms: int
) -> tuple[InnerRequest, bytes | None]:
    """Decode, validate (the proxy's rules) and encode one inner record for the store.

    Returns the request and, for an add, its stored value. Any failure on this record, whatever
    raised it, becomes a DecodeError so it is dead-lettered instead of stopping ingest.
    """
    try:
        # Consumed headers are (str, bytes | None) pairs; the stub's union also covers the
        # forms produce() accepts (no cast(): a function call per record).
        request = wire.decode(record.value(), record.headers())  # type: ignore[arg-type]
        if isinstance(request, DelayMessage):
            validate_message(request, limits, names, now_ms + _HORIZON_SLACK_MS)
            return request, codec.encode(request)
        return request, None
    except DecodeError as exc:
        reason = exc.reason
    except ValidationError as exc:
        reason = f"invalid {exc.field}: {exc.message}"
    except Exception as exc:  # bad input must never stop ingest, whatever breaks on it
        reason = f"undecodable: {type(exc).__name__}: {exc}"
    # The origin is built only for rejected records: it is on no hot path.
    raise DecodeError(reason, origin=f"{record.topic()}[{record.partition()}]@{record.offset()}")


class IngestWorker(LoopWorker):
    """One consumer thread of the node on a fixed share of the inner topic's partitions.

    Each node reads the whole inner topic alone, so partitions are assigned directly (no group
    membership, no rebalance wait at start). The store keeps the next offset of every partition
    in the same write batch as the records before it, and ingest resumes from there: a crash
    replays, never skips, and a new store reads the topic from its beginning. Offsets are also
    committed to the node's group, for lag monitoring only.

    Parameters:
        index: thread number.
        consumer_config: librdkafka config with the node's group id.
        topic: the inner topic.
        partitions: the inner partitions this worker owns.
        ledger: applies decoded requests.
        dead_letters: where undecodable records go.
        clock: time source for validation.
        limits: the shared validation limits.
        names: internal topic names (never targets).
        batch_max: most records per consume call.
        poll_timeout_ms: consume timeout.
        metrics: counters.
    """

    def __init__(
        self,
        index: int,
        consumer_config: KafkaConfig,
        topic: str,
        partitions: list[int],
        ledger: Ledger,
        dead_letters: DeadLetters,
        clock: Clock,
        limits: LimitSettings,
        names: TopicNames,
        batch_max: int,
        poll_timeout_ms: int,
        metrics: Metrics,
    ) -> None:
        super().__init__(f"ingest-{index}")
        self._config = consumer_config
        self._topic = topic
        self._partitions = partitions
        self._ledger = ledger
        self._dead = dead_letters
        self._clock = clock
        self._limits = limits
        self._names = names
        self._batch_max = batch_max
        self._timeout_s = poll_timeout_ms / 1000.0
        self._metrics = metrics
        self._consumer: Consumer | None = None
        #: Set once this worker has applied its partitions up to their end offsets as of its
        #: start: the push worker waits for it after a restart, so cancels that Kafka accepted
        #: before a crash are applied before anything is delivered.
        self.caught_up = threading.Event()
        self._catch_up_targets: dict[int, int] = {}
        #: Next offsets applied but not yet known to be fsynced (then offered to the group).
        self._unsynced: dict[int, int] = {}

    def _open(self) -> Consumer:
        if self._consumer is None:
            consumer = Consumer({**self._config, "logger": _librdkafka_log})
            stored = self._ledger.inner_offsets(self._partitions)
            assignment = [
                TopicPartition(self._topic, p, stored.get(p, OFFSET_BEGINNING))
                for p in self._partitions
            ]
            self._catch_up_targets = self._end_offsets(consumer, assignment, stored)
            log.info(
                "ingest_assigned",
                worker=self.name,
                resume_at=stored,
                catch_up=self._catch_up_targets,
            )
            consumer.assign(assignment)
            self._consumer = consumer
            self._check_caught_up({})
        return self._consumer

    @staticmethod
    def _end_offsets(
        consumer: Consumer, partitions: list[TopicPartition], stored: dict[int, int]
    ) -> dict[int, int]:
        """End offsets of the partitions that still hold records the store has not applied."""
        targets: dict[int, int] = {}
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            if high > max(low, stored.get(tp.partition, -1)):
                targets[tp.partition] = high
        return targets

    def _check_caught_up(self, reached: dict[int, int]) -> None:
        for partition, offset in reached.items():
            if self._catch_up_targets.get(partition, offset + 1) <= offset:
                del self._catch_up_targets[partition]
        if not self._catch_up_targets and not self.caught_up.is_set():
            log.info("ingest_caught_up", worker=self.name)
            self.caught_up.set()

    def _check_positions(self, consumer: Consumer) -> None:
        """Catch-up by consumer position: it also moves past transaction markers."""
        if self.caught_up.is_set() or not self._catch_up_targets:
            return
        positions = consumer.position(
            [TopicPartition(self._topic, p) for p in self._catch_up_targets]
        )
        self._check_caught_up({tp.partition: tp.offset for tp in positions if tp.offset >= 0})

    def step(self) -> None:
        consumer = self._open()
        # poll() returns as soon as one record is there; consume(n, 0) then takes what is
        # already fetched. consume(n, timeout) alone would wait for n records or the timeout.
        first = consumer.poll(self._timeout_s)
        if first is None:
            self._check_positions(consumer)
            if self._unsynced and self._ledger.sync_if_due():
                self._commit_synced(consumer)
            return
        records = [first]
        if self._batch_max > 1:
            records += consumer.consume(self._batch_max - 1, 0)
        try:
            self.ingest(consumer, records)
        except Exception:
            # The consumer has already moved past this batch: move it back, or the next
            # batch's offsets would cover (and so skip) these records for good.
            self._rewind(consumer, records)
            raise

    def _rewind(self, consumer: Consumer, records: list[Message]) -> None:
        first: dict[int, int] = {}
        for record in records:
            partition, offset = record.partition(), record.offset()
            if record.error() is None and partition is not None and offset is not None:
                first[partition] = min(offset, first.get(partition, offset))
        for partition, offset in first.items():
            consumer.seek(TopicPartition(self._topic, partition, offset))
        log.warning("ingest_batch_rewound", worker=self.name, to=first)

    def ingest(self, consumer: Consumer, records: list[Message]) -> None:
        """Apply one consumed batch: dead letters first, then the store with the offsets."""
        requests: list[InnerRequest] = []
        encoded: list[bytes | None] = []
        bad: list[tuple[bytes | None, bytes | None, Headers, str, str]] = []
        offsets: dict[int, int] = {}
        now = self._clock.now_ms()
        for record in records:
            if record.error() is not None:
                log.warning("ingest_consumer_error", error=str(record.error()))
                continue
            partition, offset = record.partition(), record.offset()
            if partition is None or offset is None:
                # librdkafka sets both on every consumed record without an error.
                raise RuntimeError(f"consumed record without a position: {partition}@{offset}")
            offsets[partition] = offset + 1
            try:
                request, value = decode_record(record, self._limits, self._names, now)
            except DecodeError as exc:
                self._metrics.incr("inner_rejected")
                log.warning("inner_record_rejected", origin=exc.origin, reason=exc.reason)
                headers = cast("Headers | None", record.headers())  # see decode_record
                bad.append((record.key(), record.value(), headers or [], exc.reason, exc.origin))
                continue
            requests.append(request)
            encoded.append(value)
        # One lag sample per batch (its oldest record), not one per record: cheap under load.
        if records and records[0].error() is None:
            self._metrics.observe("ingest_lag_ms", now - records[0].timestamp()[1])
        # Dead letters are acknowledged before the offsets that pass them are stored.
        if not self._dead.send_and_wait(bad, _DEAD_LETTER_TIMEOUT_S):
            raise RuntimeError("dead-letter topic did not acknowledge rejected inner records")
        outcome = self._ledger.apply(requests, offsets, encoded)
        self._count(outcome)
        if not self.caught_up.is_set():
            self._check_caught_up(offsets)
        self._unsynced.update(offsets)
        if self._ledger.sync_if_due():
            self._commit_synced(consumer)

    def _commit_synced(self, consumer: Consumer) -> None:
        """Offer the group the offsets of what is now fsynced (advisory: for lag monitoring)."""
        try:
            consumer.store_offsets(
                offsets=[TopicPartition(self._topic, p, o) for p, o in self._unsynced.items()]
            )
        except KafkaException as exc:  # advisory only: the store holds the real offsets
            log.info("ingest_store_offsets_skipped", error=str(exc.args[0]))
        self._unsynced.clear()

    def _count(self, outcome: ApplyOutcome) -> None:
        for name in (
            "added",
            "duplicates",
            "cancelled",
            "cancel_raced",
            "cancel_too_late",
            "cancel_unknown",
            "late",
        ):
            amount = getattr(outcome, name)
            if amount:
                self._metrics.incr("ingested" if name == "added" else name, amount)

    def finish(self) -> None:
        if self._consumer is not None:
            if self._unsynced:
                self._ledger.sync()
                self._commit_synced(self._consumer)
            self._consumer.close()  # commits the advisory group offsets
            self._consumer = None

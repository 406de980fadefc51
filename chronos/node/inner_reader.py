"""Reading the inner topic: consume records and decode them into what the store writes.

Decoding needs nothing from the store, so it can run apart from the writer: in the ingest
thread (``InnerReader``) or in a child process (``chronos.node.decoder_process``). What comes
out is plain data (strings, ints, bytes), cheap to send between processes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

import structlog
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from chronos.delivery.deadletter import Rejected
from chronos.errors import DecodeError
from chronos.inner import accept_inner
from chronos.kafka.errors import ErrorKind, classify, describe
from chronos.kafka.librdkafka import ClientErrors, consumer
from chronos.model import (
    DecodedRequest,
    Op,
)
from chronos.names import TopicNames
from chronos.settings import ChronosSettings, LimitSettings
from chronos.store import codec
from chronos.types import EpochMs, Headers, KafkaConfig

log = structlog.get_logger(__name__)

#: How long after seeking back an idle position is not trusted to show the re-read's outcome.
_SEEK_SETTLE_S = 0.5


@dataclass(slots=True)
class DecodedBatch:
    """What one read produced, in inner-topic order.

    Parameters:
        items: the decoded requests.
        offsets: next offset per partition, past every record of this batch (rejected too).
        rejected: records that failed to decode or validate.
        errors: consumer errors met while reading (logged by the writer).
        oldest_ms: timestamp of the batch's first record (ingest lag), None when empty.
        positions: while catching up, on an empty read: the consumer's position in the
            partitions not yet caught up. It moves past transaction markers that no record
            shows, which catching up must see.
        origins: (partition, offset) of each item (replica groups record where adds came from).
        appended: per partition, when the broker appended the batch's last record there, for
            records that carry that time (``message.timestamp.type=LogAppendTime``): the
            ingest watermark's proof that what came before is read (``node/watermark.py``).
        hazard: some item cancels or reschedules (removes or moves a pending message): the
            cancel gate may pass this batch's records only once it is applied; any other
            batch it may pass as soon as it is read.
        not_authorized: set when Kafka refused chronos reading the inner topic (the node ends).
        gap: set when the next offset to read was no longer in the topic (retention or
            ``DeleteRecords`` removed records before this store read them; the node ends, and
            its next start clears and rebuilds the store: ``runtime/origin.py``).
    """

    items: list[DecodedRequest] = field(default_factory=list)
    offsets: dict[int, int] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    oldest_ms: EpochMs | None = None
    positions: dict[int, int] = field(default_factory=dict)
    origins: list[tuple[int, int]] = field(default_factory=list)
    appended: dict[int, EpochMs] = field(default_factory=dict)
    hazard: bool = False
    not_authorized: str | None = None
    gap: str | None = None

    def merge(self, later: DecodedBatch) -> None:
        """Append ``later``, read after this one, as if both had been read at once."""
        self.items += later.items
        self.origins += later.origins
        self.offsets.update(later.offsets)
        self.appended.update(later.appended)
        self.hazard = self.hazard or later.hazard
        self.rejected += later.rejected
        self.errors += later.errors
        if self.oldest_ms is None:
            self.oldest_ms = later.oldest_ms
        self.positions.update(later.positions)
        self.not_authorized = self.not_authorized or later.not_authorized
        self.gap = self.gap or later.gap

    @property
    def empty(self) -> bool:
        """True when no record was read (only ``positions`` may be set)."""
        return not self.offsets and not self.errors


class BatchSource(Protocol):
    """Where the ingest thread gets decoded batches: a reader in-thread or in a child process."""

    def open(self, start: dict[int, int]) -> dict[int, int]:
        """Start reading at ``start`` (next offset per partition; beginning where missing).

        Returns the end offset of every partition that still holds records past ``start``.
        """
        ...

    def read(self, timeout_s: float) -> DecodedBatch:
        """The next batch, empty when nothing arrived within ``timeout_s``."""
        ...

    def store_offsets(self, offsets: dict[int, int]) -> None:
        """Offer the node's group these offsets (advisory: for lag monitoring only)."""
        ...

    def close(self) -> None:
        """Stop reading; commits the offered offsets."""
        ...


#: The kinds the per-record code compares with, read once: an enum member's lookup on its
#: class costs more than the comparison.
_CANCEL, _RESCHEDULE = Op.CANCEL, Op.RESCHEDULE


def decode_record(
    record: Message, limits: LimitSettings, names: TopicNames, now_ms: EpochMs
) -> DecodedRequest:
    """Decode, validate (``chronos.inner``, the rules the pipeline applies too) and encode one
    inner record for the store.

    Any failure on this record, whatever raised it, becomes a DecodeError so it is
    dead-lettered instead of stopping ingest.
    """
    try:
        # Consumed headers are (str, bytes | None) pairs; the stub's union also covers the
        # forms produce() accepts (no cast(): a function call per record).
        request = accept_inner(
            record.key(),
            record.value(),
            record.headers(),  # type: ignore[arg-type]
            limits,
            names,
            now_ms,
        )
        return codec.decoded_request(request)
    except DecodeError as exc:
        reason = exc.reason
    except Exception as exc:  # bad input must never stop ingest, whatever breaks on it
        reason = f"undecodable: {type(exc).__name__}: {exc}"
    # The origin is built only for rejected records: it is on no hot path.
    raise DecodeError(reason, origin=f"{record.topic()}[{record.partition()}]@{record.offset()}")


def decode_batch(
    records: list[Message], limits: LimitSettings, names: TopicNames, now_ms: EpochMs
) -> DecodedBatch:
    """Decode consumed records; rejected ones are kept aside with their reason."""
    batch = DecodedBatch()
    items, offsets, origins = batch.items, batch.offsets, batch.origins
    last: dict[int, Message] = {}
    for record in records:
        error = record.error()
        if error is not None:
            batch.errors.append(str(error))
            if classify(error) is ErrorKind.AUTHORIZATION:
                batch.not_authorized = describe(error)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                batch.gap = describe(error)
            batch.hazard = True  # nothing is known of what the error stands for
            continue
        partition, offset = record.partition(), record.offset()
        if partition is None or offset is None:
            # librdkafka sets both on every consumed record without an error.
            raise RuntimeError(f"consumed record without a position: {partition}@{offset}")
        offsets[partition] = offset + 1
        last[partition] = record
        try:
            item = decode_record(record, limits, names, now_ms)
            op = item[0]
            if op is _CANCEL or op is _RESCHEDULE:
                batch.hazard = True  # it removes or moves a pending message
            items.append(item)
            origins.append((partition, offset))
        except DecodeError as exc:
            headers = cast("Headers | None", record.headers())  # see decode_record
            batch.rejected.append(
                (record.key(), record.value(), headers or [], exc.reason, exc.origin)
            )
        if batch.oldest_ms is None:
            batch.oldest_ms = record.timestamp()[1]
    for partition, record in last.items():
        kind, at_ms = record.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME:
            batch.appended[partition] = at_ms
    return batch


@dataclass(frozen=True)
class ReaderSpec:
    """What an ``InnerReader`` reads and by which rules (all of it picklable: a decoder child
    receives it from the node).

    Parameters:
        consumer_config: librdkafka config with the node's group id.
        topic: the inner topic.
        partitions: the partitions read.
        limits: the shared validation limits.
        names: internal topic names (never targets).
        batch_max: most records per batch.
        poll_timeout_s: how long one read waits for a record.
        trust_gaps: see the field.
    """

    consumer_config: KafkaConfig
    topic: str
    partitions: list[int]
    limits: LimitSettings
    names: TopicNames
    batch_max: int
    poll_timeout_s: float
    #: Offsets that jump are taken as they come (a compacted topic's removed records), not
    #: read again: compact mode runs on Apache Kafka, whose gaps are real.
    trust_gaps: bool = False
    #: While records flow (the read before took its records less than this long before this
    #: read's first arrived), a read waits this long for more after its first record, instead
    #: of taking only what was fetched: under load each fetch carries a few records, and every
    #: batch costs a write per partition it touches (a member's 16 schedules). 0: never (a
    #: node alone, a group). See ``read``.
    linger_s: float = 0.0

    @classmethod
    def of_ingest(
        cls,
        settings: ChronosSettings,
        consumer_config: KafkaConfig,
        partitions: list[int],
        linger_s: float = 0.0,
    ) -> ReaderSpec:
        """A node's ingest over ``partitions`` of the inner topic, as ``settings`` say (a node
        alone's or a replica's, or a member's with its ``linger_s``)."""
        names = settings.topics.names
        return cls(
            consumer_config,
            names.inner,
            partitions,
            settings.limits,
            names,
            settings.node.ingest_batch_max,
            settings.node.ingest_poll_timeout_ms / 1000.0,
            trust_gaps=settings.rebuild.mode == "compact",
            linger_s=linger_s,
        )


class InnerReader:
    """A consumer of some inner partitions that hands out decoded batches.

    Partitions are assigned directly (no group membership, no rebalance wait at start); the
    group only receives advisory offsets, for lag monitoring.

    No silent skip: offsets of a partition follow each other unless something took the ones
    between (a transaction marker; retention is caught as a ``gap``). A record, or on an idle
    read the position, further on than the next offset expected is therefore read again from
    that offset once; only a second read that jumps the same way is taken as a real gap. Tansu
    (the embedded broker) was seen to hand a live consumer records past a range it never
    returned, which a re-read had: without this, the store silently lacked them.

    Parameters:
        spec: what to read, and the rules records must meet.
        clock_ms: current time in epoch ms, for validation.
    """

    def __init__(self, spec: ReaderSpec, clock_ms: Callable[[], EpochMs]) -> None:
        self._spec = spec
        self._topic = spec.topic
        self._now_ms = clock_ms
        self._consumer: Consumer | None = None
        #: End offsets as of ``open`` not reached yet: positions are reported until they are.
        self._catching_up: dict[int, int] = {}
        #: Next offset expected per partition (known once it was opened at one or read one).
        self._next: dict[int, int] = {}
        #: Partitions read again after a jump: where the jump landed.
        self._verifying: dict[int, int] = {}
        self._sought_at: dict[int, float] = {}
        #: Re-reads done and jumps taken as real (markers), for logs and tests.
        self.rereads = 0
        self.gaps_accepted = 0
        #: When the last read that returned records ended (monotonic s).
        self._flowed_at = -math.inf

    def _open_consumer(self) -> Consumer:
        return consumer(self._spec.consumer_config, ClientErrors("ingest"))

    def open(self, start: dict[int, int]) -> dict[int, int]:
        consumer = self._open_consumer()
        assignment = [
            TopicPartition(self._topic, p, start.get(p, OFFSET_BEGINNING))
            for p in self._spec.partitions
        ]
        targets: dict[int, int] = {}
        try:
            for tp in assignment:
                low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                if high > max(low, start.get(tp.partition, -1)):
                    targets[tp.partition] = high
            consumer.assign(assignment)
        except BaseException:
            consumer.close()  # a failed open is retried: one consumer per try would pile up
            raise
        self._consumer = consumer
        self._catching_up = dict(targets)
        self._next = {p: o for p, o in start.items() if o >= 0}
        self._verifying = {}
        return targets

    def read(self, timeout_s: float) -> DecodedBatch:
        consumer = self._opened()
        # poll() returns as soon as one record is there; consume(n, 0) then takes what is
        # already fetched. consume(n, timeout) alone would wait for n records or the timeout.
        first = consumer.poll(timeout_s)
        if first is None:
            return DecodedBatch(positions=self._positions(consumer))
        spec = self._spec
        records = [first]
        if spec.batch_max > 1:
            records += consumer.consume(spec.batch_max - 1, self._linger_s())
            if spec.linger_s:
                self._flowed_at = time.monotonic()
        records = self._in_sequence(consumer, records)
        if not records:
            return DecodedBatch()
        return decode_batch(records, spec.limits, spec.names, self._now_ms())

    def _linger_s(self) -> float:
        """How long this read waits for more records after its first: ``linger_s`` while
        records flow (the read before returned records less than ``linger_s`` ago), else
        nothing, so that a lone record (at rest, a low rate) is not held. Under a steady load
        the next record is there as soon as the last batch is handed on, and waiting turns
        many batches of a few records into one."""
        linger_s = self._spec.linger_s
        if linger_s <= 0.0 or time.monotonic() - self._flowed_at >= linger_s:
            return 0.0
        return linger_s

    def _in_sequence(self, consumer: Consumer, records: list[Message]) -> list[Message]:
        """``records`` up to any unexplained jump of offsets; a partition that jumped is read
        again from the offset expected (see the class docstring)."""
        kept: list[Message] = []
        reread: set[int] = set()
        expected = self._next
        for record in records:
            partition, offset = record.partition(), record.offset()
            if record.error() is not None or partition is None or offset is None:
                kept.append(record)
                continue
            if partition in reread:
                continue  # read again from the jump on
            wanted = expected.get(partition)
            if wanted is not None and offset != wanted:
                if offset < wanted:
                    continue  # fetched before a seek back: already handed out
                if not self._jumped(consumer, partition, wanted, offset):
                    reread.add(partition)
                    continue
            elif partition in self._verifying:
                landed = self._verifying.pop(partition)
                log.warning(
                    "inner_records_skipped_then_found",
                    partition=partition,
                    first=offset,
                    skipped_to=landed,
                )
            expected[partition] = offset + 1
            kept.append(record)
        return kept

    def _jumped(self, consumer: Consumer, partition: int, wanted: int, landed: int) -> bool:
        """The next offset of ``partition`` came as ``landed`` instead of ``wanted``: True when
        that was already seen on a read again from ``wanted`` (a real gap), else seek back and
        False."""
        if self._spec.trust_gaps:
            self.gaps_accepted += 1
            return True
        if self._verifying.get(partition, landed + 1) <= landed:
            del self._verifying[partition]
            self.gaps_accepted += 1
            log.debug("inner_gap_accepted", partition=partition, start=wanted, end=landed)
            return True
        self._verifying[partition] = landed
        self.rereads += 1
        log.info("inner_gap_read_again", partition=partition, start=wanted, end=landed)
        consumer.seek(TopicPartition(self._topic, partition, wanted))
        self._sought_at[partition] = time.monotonic()
        return False

    def _positions(self, consumer: Consumer) -> dict[int, int]:
        """Positions in every partition read: past transaction markers that no record shows,
        which catching up and the ingest watermark (``node/watermark.py``) must both see."""
        found = consumer.position([TopicPartition(self._topic, p) for p in self._spec.partitions])
        positions = {tp.partition: tp.offset for tp in found if tp.offset >= 0}
        for partition, offset in list(positions.items()):
            wanted = self._next.get(partition)
            if wanted is not None and offset > wanted:
                # Past offsets no record showed: markers, or records skipped. Only a read
                # again from ``wanted`` tells; until then nothing past it counts as read. (A
                # seek is asynchronous: the position may show the old jump for a moment.)
                if time.monotonic() - self._sought_at.get(partition, 0.0) < _SEEK_SETTLE_S:
                    positions[partition] = wanted
                    continue
                if self._jumped(consumer, partition, wanted, offset):
                    self._next[partition] = offset
                else:
                    positions[partition] = wanted
                    continue
        for partition, offset in positions.items():
            if offset >= self._catching_up.get(partition, offset + 1):
                del self._catching_up[partition]
        return positions

    def store_offsets(self, offsets: dict[int, int]) -> None:
        try:
            self._opened().store_offsets(
                offsets=[TopicPartition(self._topic, p, o) for p, o in offsets.items()]
            )
        except KafkaException as exc:  # advisory only: the store holds the real offsets
            log.info("ingest_store_offsets_skipped", error=str(exc.args[0]))

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()  # commits the advisory group offsets
            self._consumer = None

    def _opened(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("inner reader used before open()")
        return self._consumer

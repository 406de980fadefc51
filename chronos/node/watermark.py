"""The ingest watermark: how far delivery may go without outrunning a cancel Kafka acknowledged.

A cancel only holds if ingest applied it before the push reached its message's slot. Ingest
can fall behind (a burst, a broker that was down and delivers a client's queued requests at
once), so "due" alone is not enough: delivery of slot T waits until every inner record Kafka
acknowledged before ``T - margin`` has been taken care of (read, and applied if it cancels or
reschedules anything; see ``IngestWatermark``).

How the node knows that: a *probe* notes the node's time ``t`` and then asks Kafka for the end
of every owned inner partition (ListOffsets, ``read_committed`` like the ingest reader). Any
record acknowledged before ``t`` lies below the end Kafka answers, because the question was
asked after the acknowledgement; once ingest has applied each partition up to that end, the
watermark moves to ``t``. Under traffic the records themselves prove it sooner: on an inner
topic with ``message.timestamp.type=LogAppendTime`` each carries the broker's append time.
Delivery then covers slots up to ``watermark + margin`` (and never past now).

Probes are asked for, not run on a clock: delivery tells the gate the next slot it waits for
(``want``), and the probe runs when that slot is within the margin, or when the watermark is
older than ``IDLE_PROBE_MS`` (so that a silent Kafka still shows in ``/readyz``). An idle node
hosting many partitions asked Kafka for every partition's end twenty times a second before,
for nothing: 1.1 % of a core per node at 64 partitions, the largest part of what an idle
cluster node's cost grew by with its partitions.

So a cancel acknowledged at least ``margin`` before the due time (by the node's clock) is never
delivered; ingest lag beyond the margin makes deliveries late, never wrong, and that lateness is
counted (``cancel_gate_held_ms``). While Kafka cannot be asked (an outage), the watermark stands
still and so does delivery: nothing can prove a cancel did not arrive meanwhile. Clock
assumptions: a client's clock ahead of the node's by d shortens the margin by d (what "before
the due time" means for a request is judged on the client's clock, the delivery on the node's);
so does a broker's clock ahead by d, for the append times. A broker ahead by more than ingest's
lag shows (a record read "before" it was appended): the largest such lead seen is taken off
every append time from then on (``broker_clock_ahead`` in the log).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Collection, Mapping

import structlog

from chronos.clock import Clock, SystemClock
from chronos.lifecycle import LoopWorker
from chronos.logs import Throttle
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: (partition -> end offset) of the owned inner partitions, asked of Kafka now; raises on failure.
ListEnds = Callable[[], Mapping[int, int]]

#: Pause after a failed probe.
_FAILED_RETRY_S = 0.2

#: Longest a watermark goes unprobed when no delivery waits for it: ``/readyz``'s Kafka check
#: (``admin.kafka_silence_s``, 10 s by default) reads its age.
IDLE_PROBE_MS = 1_000

#: Most probes kept waiting for ingest: older ones are dropped first (a newer probe that is
#: applied says more), so a long ingest lag costs bounded memory.
_MAX_PENDING = 256


class IngestWatermark:
    """The cancel gate (``schedule/cancel_gate.py``): what ingest has read and applied
    against probed ends and append times; thread-safe.

    Two proofs that every record Kafka acknowledged before a time ``t`` is taken care of:

    - a *probe* (above): Kafka answered the ends as of a question asked at ``t`` and ingest
      applied them; needs a round trip to Kafka and then ingest's catch-up;
    - an *append time*: on an inner topic with ``message.timestamp.type=LogAppendTime`` every
      record carries the time the broker appended it. A partition's records are appended and
      read in offset order, so once ingest took care of a record appended at ``t``, it took
      care of every record of that partition acknowledged before ``t`` (appended before it);
      ``read_committed`` reads nothing past an undecided transaction, so a committed cancel
      counts as well. No round trip: under traffic the watermark trails now by ingest's own
      lag only. Clients cannot forge it (the broker sets the time); a broker's clock ahead of
      the node's shortens the margin by as much, and a lead that shows is taken off
      (``_believable``). Records that carry a producer's time (a topic left at
      ``CreateTime``, or Tansu) prove nothing.

    "Taken care of" is *read* for a batch without cancels or reschedules (its adds are only
    late until applied: nothing can be delivered wrongly for want of them), and *applied* for
    one with any (``DecodedBatch.hazard``): a cancel holds only once the store has it. A batch
    read after an unapplied hazard proves nothing until the hazard is applied. So the
    watermark follows the decoder, not the store writes, while no cancel is in flight.

    Per owned partition the latest of these holds; the watermark is the earliest over the
    partitions (a quiet partition has no new records: its probes carry it).

    Parameters:
        applied: next offset per owned partition the store already holds (its inner offsets).
        margin_ms: how far past the watermark delivery may go (``node.cancel_margin_ms``).
        partitions: the owned partitions (default: those of ``applied``).
        clock: the node's time, which an append time may not be later than.
        carried: per partition, what an earlier gate over the same store proved (a cluster
            member's ingest started again over more partitions): still true, since what it
            proved taken care of is in the store; the lanes of those partitions need not
            wait for this gate's first probe.
    """

    def __init__(
        self,
        applied: Mapping[int, int],
        margin_ms: int,
        partitions: Collection[int] | None = None,
        clock: Clock | None = None,
        carried: Mapping[int, EpochMs] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._now_ms = (clock or SystemClock()).now_ms
        self._applied = dict(applied)
        self._partitions = frozenset(applied if partitions is None else partitions)
        self._pending: deque[tuple[EpochMs, dict[int, int]]] = deque()
        self._margin = margin_ms
        #: Node time of the newest probe whose end ingest applied, per partition.
        self._probed: dict[int, EpochMs] = {}
        self._carried = dict(carried or {})
        #: How far each partition is proven (absent: not yet): its probes, records, carried.
        self._values: dict[int, EpochMs] = {}
        #: The newest probe applied in every partition (what proves a gate over none).
        self._probed_all: EpochMs | None = None
        #: Append time of the last applied record, per partition (LogAppendTime topics).
        self._appended: dict[int, EpochMs] = {}
        #: Batches read and not applied yet, per partition in offset order:
        #: (next offset past the batch, append time of its last record or -1, hazard).
        self._read: dict[int, deque[tuple[int, EpochMs, bool]]] = {}
        self._clock_log = Throttle()
        #: The most an append time was seen ahead of the node's clock: taken off every one.
        self._skew_ms = 0
        #: Node time before which every acknowledged inner record is taken care of; None: not
        #: yet known (nothing may be delivered).
        self._value: EpochMs | None = None
        #: The earliest slot delivery waits for that the horizon does not reach yet (None:
        #: none); a probe is due ``margin`` before it.
        self._wanted: EpochMs | None = None
        #: Set when ``_wanted`` is lowered (or the probe is stopped): wakes the probe's wait.
        self._demand = threading.Event()
        if self._carried:
            self._advance()  # the carried proofs hold from the start

    @property
    def value(self) -> EpochMs | None:
        """The watermark over every partition, None until each one is proven."""
        return self._value

    def proofs(self) -> dict[int, EpochMs]:
        """How far each partition is proven now (those that are): a gate started later over
        the same store may carry them (``carried``)."""
        with self._lock:
            return dict(self._values)

    def horizon_of(self, partition: int, now_ms: EpochMs) -> EpochMs:
        """The last slot of ``partition``'s schedule delivery may cover now: its own proof
        only (one lane per partition; a partition that ingest has not caught up holds no
        other's lane)."""
        value = self._values.get(partition)
        if value is None:
            return 0
        return min(now_ms, value + self._margin)

    def read(
        self, offsets: Mapping[int, int], appended: Mapping[int, EpochMs], hazard: bool
    ) -> None:
        """Ingest read a batch up to these next offsets, the last of its records appended at
        ``appended`` (per partition); ``hazard``: it cancels or reschedules something. Told
        again for a batch already told (a merged one) changes nothing."""
        times = self._believable(appended)
        with self._lock:
            for partition, end in offsets.items():
                read = self._read.setdefault(partition, deque())
                if end <= (read[-1][0] if read else self._applied.get(partition, -1)):
                    continue
                read.append((end, times.get(partition, -1), hazard))
            self._advance()

    def applied(
        self, offsets: Mapping[int, int], appended: Mapping[int, EpochMs] | None = None
    ) -> None:
        """Ingest made these next offsets visible in the store (records or positions past
        transaction markers), and the last of those records were appended at ``appended``
        (LogAppendTime, per partition); lower ones than already known are ignored."""
        times = self._believable(appended) if appended else {}
        with self._lock:
            known = self._applied
            for partition, offset in offsets.items():
                if offset > known.get(partition, -1):
                    known[partition] = offset
                read = self._read.get(partition)
                while read and read[0][0] <= offset:
                    read.popleft()
            for partition, at_ms in times.items():
                if at_ms > self._appended.get(partition, -1):
                    self._appended[partition] = at_ms
            self._advance()

    def probed(self, at_ms: EpochMs, ends: Mapping[int, int]) -> None:
        """Kafka answered ``ends`` to a question asked at ``at_ms`` (node time)."""
        with self._lock:
            self._pending.append((at_ms, dict(ends)))
            if len(self._pending) > _MAX_PENDING:
                self._pending.popleft()
            self._advance()

    def horizon(self, now_ms: EpochMs) -> EpochMs:
        """The last slot delivery may cover now: ``min(now, watermark + margin)``."""
        value = self._value
        if value is None:
            return 0
        return min(now_ms, value + self._margin)

    def want(self, slot: EpochMs) -> None:
        """Delivery waits for ``slot``: the probe runs ``margin`` before it (at once for one
        due already), unless the watermark reaches that far first. Called per scan and per
        idle lane: what asks nothing new returns without the lock."""
        value, wanted = self._value, self._wanted
        if (value is not None and value + self._margin >= slot) or (
            wanted is not None and wanted <= slot
        ):
            return
        with self._lock:
            value = self._value
            if value is not None and value + self._margin >= slot:
                return
            if self._wanted is None or slot < self._wanted:
                self._wanted = slot
                self._demand.set()

    def next_probe_ms(self, interval_ms: int) -> EpochMs | None:
        """When the next probe is due (node time; None: now, no watermark yet): ``margin``
        before the earliest wanted slot, ``interval_ms`` after the watermark at the soonest,
        ``IDLE_PROBE_MS`` after it at the latest. Clears the demand it answers for, so that
        ``wait_for_demand`` sleeps until a want lowers it."""
        self._demand.clear()
        with self._lock:
            value, wanted = self._value, self._wanted
        if value is None:
            return None
        due = value + IDLE_PROBE_MS
        if wanted is not None:
            due = min(due, max(wanted - self._margin, value + interval_ms))
        return due

    def wait_for_demand(self, timeout_s: float) -> None:
        """Sleep until ``timeout_s`` passed or a want (or ``wake``) came."""
        self._demand.wait(timeout_s)

    def wake(self) -> None:
        """End a ``wait_for_demand`` now (the probe is stopping)."""
        self._demand.set()

    def _believable(self, appended: Mapping[int, EpochMs]) -> Mapping[int, EpochMs]:
        """Append times on the node's clock: a record read here was appended before it was
        read, so a time later than now says the broker's clock runs ahead of ours by at least
        that much; the largest such lead is taken off every append time from then on (a
        proof a few ms too early could let delivery outrun a cancel by as much)."""
        if not appended:
            return appended
        ahead = max(appended.values()) - self._now_ms()
        if ahead > self._skew_ms:
            self._skew_ms = ahead
            held = self._clock_log.admit("ahead")
            if held is not None:
                log.warning(
                    "broker_clock_ahead",
                    ahead_ms=ahead,
                    effect="append times are taken this much earlier from now on; the "
                    "broker's and the node's clocks should agree (NTP)",
                    repeated=held,
                )
        skew = self._skew_ms
        return appended if not skew else {p: at - skew for p, at in appended.items()}

    def _advance(self) -> None:
        applied = self._applied
        pending = self._pending
        # Per partition, the newest probe whose end ingest applied there proves it at its
        # time; a probe applied in every partition makes the older ones useless.
        resolved: set[int] = set()
        for index in range(len(pending) - 1, -1, -1):
            at_ms, ends = pending[index]
            whole = True
            for partition, end in ends.items():
                if applied.get(partition, 0) >= end:
                    if partition not in resolved:
                        resolved.add(partition)
                        if at_ms > self._probed.get(partition, -1):
                            self._probed[partition] = at_ms
                else:
                    whole = False
            if whole:
                if self._probed_all is None or at_ms > self._probed_all:
                    self._probed_all = at_ms
                for _ in range(index + 1):
                    pending.popleft()
                break
        values = self._values
        lowest: EpochMs | None = None
        for partition in self._partitions:
            proven = self._proven(partition)
            if proven is not None and proven > values.get(partition, -1):
                values[partition] = proven
            known = values.get(partition)
            if known is None:
                return  # a partition proven by nothing yet: no watermark over them all
            if lowest is None or known < lowest:
                lowest = known
        if lowest is None:
            lowest = self._probed_all  # a gate over no partition: its probes alone
        if lowest is None:
            return
        if self._value is None or lowest > self._value:
            self._value = lowest
            wanted = self._wanted
            if wanted is not None and lowest + self._margin >= wanted:
                self._wanted = None

    def _proven(self, partition: int) -> EpochMs | None:
        """How far ``partition`` is taken care of: its probes, its applied records' times,
        what an earlier gate proved, and the times of batches read since, up to the first
        unapplied hazard (None: nothing proves anything yet). Records prove nothing before a
        first probe or carried proof: those establish that ingest reads the partition from
        where the store left it."""
        if partition not in self._probed and partition not in self._carried:
            return None
        proven: EpochMs | None = None
        for known in (
            self._probed.get(partition),
            self._appended.get(partition),
            self._carried.get(partition),
        ):
            if known is not None and (proven is None or known > proven):
                proven = known
        for _end, at_ms, hazard in self._read.get(partition, ()):
            if hazard:
                break
            if at_ms >= 0 and (proven is None or at_ms > proven):
                proven = at_ms
        return proven


class WatermarkProbe(LoopWorker):
    """Asks Kafka for the owned inner partitions' ends when delivery waits for the watermark
    (``IngestWatermark.want``; at most every ``interval_ms``) and at least every
    ``IDLE_PROBE_MS``, unless the watermark moved within that time anyway: while records come,
    their append times keep it fresher than a probe could (a probe proves the past by a round
    trip), and a ListOffsets twenty times a second cost the node's librdkafka threads and the
    broker for nothing. A quiet partition, or a topic whose records carry producers' times,
    is probed when a delivery needs it.

    Parameters:
        watermark: told each answer with the time the question was asked.
        list_ends: one ListOffsets round (``read_committed``) for the owned partitions.
        clock: the node's time source (the one delivery compares due times with).
        interval_ms: least time between probes while delivery waits; keep it below the
            margin.
    """

    def __init__(
        self,
        watermark: IngestWatermark,
        list_ends: ListEnds,
        clock: Clock,
        interval_ms: int,
    ) -> None:
        super().__init__("watermark")
        self._watermark = watermark
        self._list_ends = list_ends
        self._clock = clock
        self._interval_ms = interval_ms
        self._interval_s = interval_ms / 1000.0
        self._failing = False

    def stop(self) -> None:
        super().stop()
        self._watermark.wake()

    def step(self) -> None:
        due = self._watermark.next_probe_ms(self._interval_ms)
        at_ms = self._clock.now_ms()
        if due is not None and at_ms < due and not self._failing:
            self._watermark.wait_for_demand((due - at_ms) / 1000.0)
            return
        try:
            ends = self._list_ends()
        except Exception as exc:
            if not self._failing:
                self._failing = True
                log.warning("watermark_probe_failed", error=str(exc), delivery="held")
            # Each failed probe opens a new admin client next time (``StableEnds``): not more
            # than a few a second while Kafka is away.
            self._stop.wait(max(self._interval_s, _FAILED_RETRY_S))
            return
        if self._failing:
            self._failing = False
            log.info("watermark_probe_recovered")
        self._watermark.probed(at_ms, ends)
        self._stop.wait(self._interval_s)

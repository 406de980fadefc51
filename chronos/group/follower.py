"""A replica's view of its group's committed progress, applied to its own store."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import structlog
from confluent_kafka import OFFSET_BEGINNING, KafkaError, Message, TopicPartition

from chronos.errors import DecodeError
from chronos.kafka.batches import read_ready
from chronos.kafka.librdkafka import ClientErrors
from chronos.lifecycle import LoopWorker
from chronos.schedule.progress_record import Claim, Cut, RepeatState, cut_order, decode
from chronos.settings import KafkaValue
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: How long a backup's read waits for a record: also how long a takeover waits for the
#: follow worker to stop (its last read ends), a step of every handover.
_POLL_S = 0.05
_BATCH = 1000
#: A progress reader's consumer: committed records only, told when it reached the end, and
#: never committing offsets (it is assigned, not a member of its group).
READER_OPTIONS: Mapping[str, KafkaValue] = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "isolation.level": "read_committed",
}


class ProgressConsumer(Protocol):
    """What the progress reader needs of a consumer (confluent-kafka's, or a test's)."""

    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def poll(self, timeout: float = ...) -> Message | None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Message]: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int]: ...
    def close(self) -> None: ...


#: Builds a consumer: (group id, error handler, options) -> consumer (``KafkaClients.consumer``).
OpenProgressConsumer = Callable[[str, ClientErrors, Mapping[str, KafkaValue]], ProgressConsumer]


class ProgressReader(Protocol):
    """What a replica reads the committed progress through (``ProgressLog``, or a test's)."""

    #: The offset of the last end of the topic reached, -1 before any.
    end_reached: int
    #: The offset after the last record read, -1 before any.
    position: int

    def read(self, timeout_s: float) -> list[Cut | RepeatState]: ...
    def skip_to(self, offset: int) -> None: ...
    def end_offset(self, timeout_s: float, topic: str | None = None, partition: int = 0) -> int: ...
    def close(self) -> None: ...


class ProgressLog:
    """Reads the progress topic from its beginning with ``read_committed``: what committed
    delivery transactions wrote, nothing of an aborted or open one.

    Parameters:
        topic: the progress topic (a group's, or a node alone's).
        reader_group: its consumer's group id (never joined: librdkafka wants one).
        open_consumer: builds its consumer.
        errors: the consumer's error handler (an authorization failure ends the node).
    """

    def __init__(
        self,
        topic: str,
        reader_group: str,
        open_consumer: OpenProgressConsumer,
        errors: ClientErrors,
    ) -> None:
        self.topic = topic
        self._errors = errors
        self._consumer = open_consumer(reader_group, errors, READER_OPTIONS)
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        #: The offset of the last end of the topic reached, -1 before any.
        self.end_reached = -1
        #: The offset after the last record read, -1 before any.
        self.position = -1

    def read(self, timeout_s: float) -> list[Cut | RepeatState]:
        """The records that arrived, in order (at most a batch)."""
        out: list[Cut | RepeatState] = []
        for message in read_ready(self._consumer, _BATCH, timeout_s):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self.end_reached = message.offset() or 0
                else:
                    self._errors(error)
                continue
            self.position = (message.offset() or 0) + 1
            record = applicable(message)
            if record is not None:
                out.append(record)
        return out

    def skip_to(self, offset: int) -> None:
        """Read on from ``offset`` (a master's own last committed cut: what lies before it
        this replica wrote itself, and applied)."""
        if offset > self.position:
            self._consumer.seek(TopicPartition(self.topic, 0, offset))
            self.position = offset

    def end_offset(self, timeout_s: float, topic: str | None = None, partition: int = 0) -> int:
        """The end of the progress topic now (after a fencing ``init``: its committed end), or
        of another topic's partition."""
        _low, high = self._consumer.get_watermark_offsets(
            TopicPartition(topic or self.topic, partition), timeout=timeout_s
        )
        return int(high)

    def close(self) -> None:
        self._consumer.close()


def applicable(message: Message) -> Cut | RepeatState | None:
    """The record a follower applies from one progress message (not an error), or None: an
    undecodable one (logged) or a claim. A claim changes no store: only a winner writes cuts
    (``group/claims.py``), so a follower applies cuts without asking who claimed what."""
    record = decoded(message)
    return None if isinstance(record, Claim) else record


def decoded(message: Message) -> Cut | RepeatState | Claim | None:
    """One progress message's record (not an error), or None when it is undecodable
    (logged: one bad record must not stop a reader)."""
    try:
        return decode(message.key(), message.value())
    except DecodeError as exc:
        log.error(
            "progress_record_undecodable",
            topic=message.topic(),
            offset=message.offset(),
            reason=str(exc),
        )
        return None


def read_to_end(
    reader: ProgressReader, timeout_s: float, stable_end: int | None = None
) -> tuple[Cut | None, dict[str, RepeatState]]:
    """The last cut and each repeat's last state, read from the beginning to ``stable_end``
    (the topic's last stable offset, ``kafka.admin.stable_end``), or to the first end the
    reader reaches (bounded by ``timeout_s``: TimeoutError when it does not get there).

    A ``read_committed`` reader stops at the last stable offset, and librdkafka reports the
    end only at the high watermark: a master keeps a delivery transaction open most of the
    time, which holds the high watermark past the stable offset, so a reader of a group's
    topic waiting for the end waits until the master pauses (a replica restarted under load
    failed after 30 s). A node alone's topic has no transactions: its end comes."""
    cut: Cut | None = None
    states: dict[str, RepeatState] = {}
    deadline = time.monotonic() + timeout_s
    while reader.end_reached < 0 and (stable_end is None or reader.position < stable_end):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the progress topic was not read to its end in {timeout_s} s")
        for record in reader.read(0.2):
            if isinstance(record, Cut):
                cut = record
            else:
                states[record.message_id] = record
    return cut, states


#: Applies one committed record to the store (``ReplicaStore.apply_cut``).
ApplyCut = Callable[[EpochMs, Sequence[RepeatState], Mapping[int, int]], None]


class Follower:
    """Committed progress waiting until this store's ingest covers it, then applied.

    A record is applied once ingest has stored every add below its cut (otherwise a repeat
    state could name an id not stored yet, and the seek would pass adds not stored yet).

    A partition of a cluster node has its cuts in two logs (``node_log.py``): its own, with
    its repeat states and claims (``take``), and its owner's node log (``take_node_cuts``).
    Each node-log cut names the last own-log cut of its term before it (``Cut.logged``) and
    waits until that one was taken, so that the repeat states it carried are applied first;
    a cut older than one taken is dropped (a cut is cumulative: a later one says all).

    Parameters:
        apply: writes one committed record to the store.
        ingested: the store's next inner offset per owned partition.
    """

    def __init__(self, apply: ApplyCut, ingested: Callable[[], dict[int, int]]) -> None:
        self._apply = apply
        self._ingested = ingested
        self._waiting: deque[tuple[Cut, list[RepeatState]]] = deque()
        self._states: list[RepeatState] = []
        #: (term, seq) of the last own-log cut taken, and of the last cut taken from either.
        self._own: tuple[int, int] | None = None
        self._taken: tuple[int, int] | None = None
        #: The newest node-log cut waiting for the own-log cut it names.
        self._held: Cut | None = None
        #: The newest cut applied to the store.
        self.applied: Cut | None = None
        #: The newest cut read.
        self.latest: Cut | None = None
        #: Whether the progress topic was read to its end once: ``latest`` then is the cut
        #: committed when this replica started, or a later one.
        self.read_to_end = False

    def take(self, records: list[Cut | RepeatState], end_reached: bool = False) -> None:
        """Records in the order the progress topic holds them; ``end_reached`` when the read
        that returned them reached the topic's end."""
        for record in records:
            if isinstance(record, Cut):
                self._queue(record, self._states)
                self._states = []
                self._own = cut_order(record)
                self._release_held()
            else:
                self._states.append(record)
        self.read_to_end = self.read_to_end or end_reached

    def take_node_cuts(self, cuts: Sequence[Cut]) -> None:
        """This partition's cuts read from a node log, in that log's order."""
        for cut in cuts:
            held = self._held
            if held is None or cut_order(cut) > cut_order(held):
                self._held = cut
        self._release_held()

    def _release_held(self) -> None:
        held = self._held
        if held is None:
            return
        if self._taken is not None and cut_order(held) <= self._taken:
            self._held = None  # a later cut was taken: it says all this one says
            return
        own = self._own
        logged = -1 if held.logged is None else held.logged
        if own is not None and own[0] == held.term and own[1] >= logged:
            self._held = None
            self._queue(held, [])

    def _queue(self, cut: Cut, states: list[RepeatState]) -> None:
        self._waiting.append((cut, states))
        self.latest = cut
        self._taken = cut_order(cut)

    def apply_covered(self) -> int:
        """Apply every waiting record ingest now covers; returns how many."""
        if not self._waiting:
            return 0
        ingested = self._ingested()
        covered = 0
        for cut, _ in self._waiting:
            if any(ingested.get(p, 0) < o for p, o in cut.offsets.items()):
                break
            covered += 1
        if not covered:
            return 0
        states: dict[str, RepeatState] = {}
        cut = self._waiting[0][0]
        for _ in range(covered):
            cut, batch = self._waiting.popleft()
            for state in batch:
                if state.message is None and state.message_id in states:
                    # A repeat that finished after a state of these records (its last
                    # occurrence moved, then delivered in the same transaction): the state
                    # says where that occurrence went, behind this cut's seek. Dropped, the
                    # store would keep it where it was, ahead of the seek: delivered again.
                    continue
                states[state.message_id] = state
        self._apply(cut.seek_ms, list(states.values()), cut.offsets)
        self.applied = cut
        return covered

    @property
    def waiting(self) -> int:
        """Records read and not applied yet."""
        return len(self._waiting)


class FollowWorker(LoopWorker):
    """A backup's loop: read the progress topic, apply what ingest covers.

    Parameters:
        log_: the progress topic reader.
        follower: applies records to the store.
    """

    def __init__(self, log_: ProgressReader, follower: Follower) -> None:
        super().__init__("follow")
        self._log = log_
        self._follower = follower
        self._logged_lag_at = 0.0

    def step(self) -> None:
        records = self._log.read(_POLL_S)
        self._follower.take(records, self._log.end_reached >= 0)
        self._follower.apply_covered()
        waiting = self._follower.waiting
        if waiting > 1000 and time.monotonic() - self._logged_lag_at > 10:
            self._logged_lag_at = time.monotonic()
            log.warning("follower_behind_ingest", waiting_records=waiting)

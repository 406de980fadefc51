"""The push frontier: how the ingest/push hand-off stays race-free without stalling the push.

DDMQ Chronos loses a message when its push thread advances the seek timestamp past a window
while an ingest batch holding a message due in that window is still being written (DESIGN
§3.1). Here every write that places messages first *reserves* its slots: it reads the frontier
F, puts each message at ``max(due, F + 1)``, and until its write is visible the frontier cannot
pass the lowest slot it reserved. The push worker moves the frontier before every scan and
scans only up to it. A message is therefore either visible to the scan that covers its slot,
or lands in a slot that a later scan will cover.

Why reservations instead of one lock held across the write: a RocksDB write releases the GIL,
and under load getting it back took milliseconds; with the write under the lock, the push
worker waited that long on every scan (a quarter of its time at 10,000 msg/s). A reservation
only holds the frontier back below the messages being written, usually seconds ahead of now,
so the push worker goes on.

Replica groups also need the *cut* of a move (``cut``): the inner offsets whose writes had
completed when the frontier last moved. Every add below those offsets was placed while the
frontier was lower, so its slot is at most the new frontier exactly when its due time is; every
later add lands behind it. The pair (frontier, offsets) therefore says which adds a master has
delivered using only the adds' due times and offsets, which every replica knows
(``chronos/group/``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from chronos.types import EpochMs


class Frontier:
    """The push worker's scan frontier plus the wake-up channel from writers to push.

    Parameters:
        start_ms: the initial frontier, the persisted seek timestamp.
    """

    def __init__(self, start_ms: EpochMs, wake: Wake | None = None) -> None:
        self._lock = threading.Lock()
        self._wake = wake or Wake()
        self._value = start_ms
        #: Lowest slot of every write in progress, by reservation number.
        self._reserved: dict[int, EpochMs] = {}
        #: Every write in progress (placing or not), by reservation number.
        self._open: set[int] = set()
        self._numbers = itertools.count()
        self._held_back = False
        #: Next inner offset per partition of every completed write, and its copy as of the
        #: last move of the frontier (see ``cut``).
        self._completed: dict[int, int] = {}
        self._cut: dict[int, int] = {}
        #: The earliest slot notified since ``take_notified`` last looked (None: none).
        self._notified: EpochMs | None = None

    @contextmanager
    def placing(
        self, earliest_due: EpochMs | None, offsets: Mapping[int, int] | None = None
    ) -> Iterator[EpochMs]:
        """Reserve slots for one write; yields the frontier F to place messages after.

        Inside the block, messages go to ``slot_for(F, due)`` with ``due >= earliest_due``,
        and the frontier stays below ``max(earliest_due, F + 1)``, the lowest such slot, until
        the block ends: make the write visible inside it. ``earliest_due`` None places nothing
        (a write of cancels only); F is still the frontier as of the start. ``offsets`` are
        the inner offsets the write stores: they count as completed when the block ends
        without an exception.
        """
        with self._lock:
            frontier = self._value
            number = next(self._numbers)
            self._open.add(number)
            if earliest_due is not None:
                self._reserved[number] = max(earliest_due, frontier + 1)
        completed = False
        try:
            yield frontier
            completed = True
        finally:
            with self._lock:
                self._reserved.pop(number, None)
                self._open.discard(number)
                if completed and offsets:
                    self._completed.update(offsets)
                held_back, self._held_back = self._held_back, False
            if held_back:
                self.notify(frontier + 1)  # the push worker waits for this write: wake it

    @property
    def value(self) -> EpochMs:
        """The current frontier (informational; placement must use ``placing``)."""
        return self._value

    def advance(self, to_ms: EpochMs) -> EpochMs:
        """Move the frontier towards ``to_ms`` (never back, never onto a reserved slot).

        Returns the frontier after the move: scan up to it, not to ``to_ms``.
        """
        with self._lock:
            target = to_ms
            if self._reserved:
                limit = min(self._reserved.values()) - 1
                if limit < target:
                    target = limit
                    self._held_back = True
            if target > self._value:
                self._value = target
                self._cut = dict(self._completed)
            return self._value

    def settled(self, timeout_s: float) -> dict[int, int] | None:
        """The inner offsets of every completed write, once each write begun before this call
        has ended: a row that a scan just before saw is then below them. None when one is
        still open after ``timeout_s`` (a write takes milliseconds).

        Why: a master that plans messages ahead of its frontier (``delivery/rate_plan.py``)
        publishes their moves with a cut whose offsets must cover those messages' adds, or a
        backup could apply a move before it stored the message (``group/follower.py``)."""
        with self._lock:
            begun = next(self._numbers)
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if not any(number < begun for number in self._open):
                    return dict(self._completed)
            if time.monotonic() > deadline:
                return None
            time.sleep(0.0005)

    def cut(self) -> tuple[EpochMs, dict[int, int]]:
        """(frontier, offsets): the inner offsets of the writes completed before the frontier
        last moved. An add below them has a slot <= frontier exactly when its due time is."""
        with self._lock:
            return self._value, dict(self._cut)

    def reset(self, value: EpochMs, offsets: Mapping[int, int]) -> None:
        """Set frontier and cut outright: a promoted replica starts from the committed progress.
        Only while nothing places or scans."""
        with self._lock:
            self._value = value
            self._completed = dict(offsets)
            self._cut = dict(offsets)
        self._wake.restart()

    def slot_for(self, frontier: EpochMs, due_ms: EpochMs) -> EpochMs:
        """Where a message due at ``due_ms`` must be stored given the reserved ``frontier``."""
        return due_ms if due_ms > frontier else frontier + 1

    def notify(self, slot_ms: EpochMs) -> None:
        """Tell the push worker a message now waits at ``slot_ms`` (wakes it if earlier)."""
        with self._lock:
            if self._notified is None or slot_ms < self._notified:
                self._notified = slot_ms
        self._wake.notify(slot_ms)

    def take_notified(self) -> EpochMs | None:
        """The earliest slot notified since the last call (None: none): a loop delivering
        several partitions through one wake learns which of them a write touched
        (``group/lane.py``), and scans only those."""
        with self._lock:
            notified, self._notified = self._notified, None
            return notified

    def wait(self, until_ms: EpochMs | None, now_ms: EpochMs, max_wait_s: float) -> None:
        """Sleep until ``until_ms``, an earlier ``notify``, ``stop`` or ``max_wait_s``."""
        self._wake.wait(until_ms, now_ms, max_wait_s)

    def stop(self) -> None:
        """Wake a waiting push worker for shutdown."""
        self._wake.stop()


class Wake:
    """The wake-up channel from writers to the one thread that delivers: the earliest slot
    notified since it last looked. A node delivering several partitions (``group/lane.py``)
    gives each partition's frontier the same one, so a write to any of them wakes its loop.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._earliest: EpochMs | None = None
        self._stopped = False

    def notify(self, slot_ms: EpochMs) -> None:
        """A message now waits at ``slot_ms``: wake the waiter if that is earlier."""
        with self._condition:
            if self._earliest is None or slot_ms < self._earliest:
                self._earliest = slot_ms
                self._condition.notify_all()

    def wait(self, until_ms: EpochMs | None, now_ms: EpochMs, max_wait_s: float) -> None:
        """Sleep until ``until_ms``, an earlier ``notify``, ``stop`` or ``max_wait_s``."""
        with self._condition:
            if self._stopped:
                return
            if self._earliest is not None and (until_ms is None or self._earliest < until_ms):
                until_ms = self._earliest
            timeout = max_wait_s if until_ms is None else (until_ms - now_ms) / 1000.0
            if timeout > 0:
                self._condition.wait(min(timeout, max_wait_s))
            self._earliest = None

    def stop(self) -> None:
        """Wake the waiter for shutdown; later waits return at once until ``restart``."""
        with self._condition:
            self._stopped = True
            self._condition.notify_all()

    def restart(self) -> None:
        """Waits sleep again (a promoted replica's loop after a stopped one)."""
        with self._condition:
            self._stopped = False

"""Expiry tombstones (``node/expiry.py``): only while this node delivers, each to its id's
partition, a null value naming what it ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from chronos import wire
from chronos.kafka.partitioner import partition_of
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import Expiry
from chronos.node.expiry import ExpiryWriter, id_partition


def _writer(
    publisher: StubPublisher | None = None,
    *,
    rate: int = 10**9,
    partition: Callable[[str], int] = lambda _id: 0,
    delivering: Callable[[], bool] = lambda: True,
    metrics: CountingMetrics | None = None,
    stopping: threading.Event | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> ExpiryWriter:
    """An expiry writer to the topic ``inner``; each test names only what it is about."""
    return ExpiryWriter(
        publisher=publisher or StubPublisher(auto=True),
        inner_topic="inner",
        partition=partition,
        delivering=delivering,
        rate=rate,
        metrics=metrics or CountingMetrics(),
        stopping=stopping,
        monotonic=monotonic,
    )


def test_an_id_goes_to_the_only_owned_partition_or_where_murmur2_puts_it() -> None:
    assert id_partition([2], 4)("anything") == 2
    spread = id_partition([0, 1, 2, 3], 4)
    assert [spread(f"id-{n}") for n in range(20)] == [
        partition_of(f"id-{n}".encode(), 4) for n in range(20)
    ]


def test_tombstones_go_out_only_while_delivering_and_name_what_they_end() -> None:
    """Mutants caught: a backup writing tombstones (a master and its backups would each
    write one per id); a cancel's tombstone naming a slot (a store would keep a newer
    cancel's state or forget the wrong one)."""
    publisher = StubPublisher(auto=True)
    delivering = {"now": False}
    metrics = CountingMetrics()
    writer = _writer(
        publisher, partition=lambda _id: 3, delivering=lambda: delivering["now"], metrics=metrics
    )
    writer([("a", 1_700_000_000_000)])
    assert publisher.published == []
    delivering["now"] = True
    writer([("a", 1_700_000_000_000), ("c", -1_700_000_000_005)])
    first, second = publisher.published
    assert (first.topic, first.partition, first.key, first.value) == ("inner", 3, b"a", None)
    assert wire.decode(first.value, first.headers) == Expiry("a", 1_700_000_000_000)
    assert wire.decode(second.value, second.headers) == Expiry("c", 0, 1_700_000_000_005)
    assert metrics.totals()["expiry_tombstones"] == 2


def test_a_stop_wakes_the_pacing_and_the_rest_still_goes_out() -> None:
    """Mutant caught: pacing by ``time.sleep`` (a pass of 100,000 ids at 10 a second would
    hold the delete worker's stop for hours). The stop is set first; at one a second the
    writer owes 1,000 s of pacing and must not wait for any of it."""
    publisher = StubPublisher(auto=True)
    stopping = threading.Event()
    stopping.set()
    writer = _writer(publisher, rate=1, stopping=stopping)
    finished = threading.Event()

    def expire() -> None:
        writer([(f"id-{n}", 1_700_000_000_000) for n in range(1000)])
        finished.set()

    worker = threading.Thread(target=expire, daemon=True)
    worker.start()
    assert finished.wait(60), "the paced writer did not wake on its stop"
    assert len(publisher.published) == 1000


class _RecordedWaits(threading.Event):
    """A stop event whose waits return at once and are recorded: the pacing's plan, without
    waiting for it. Give the writer ``_frozen`` as its clock too, so that the plan does not
    depend on how long the machine took between two batches (under load a batch took over
    half a second: the third wait was 5 s, not 6)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(0.0 if timeout is None else timeout)
        return False


def _frozen() -> float:
    """A monotonic clock that never moves: the waits recorded are the pacing's plan alone."""
    return 1000.0


def test_a_pass_is_spread_over_its_seconds_in_small_batches() -> None:
    """Mutants caught: a pass sent at the cap rate (20,000 a second; measured: ingest, which
    reads the tombstones back, fell seconds behind), or in one burst per chunk of 10,000."""
    waits = _RecordedWaits()
    publisher = StubPublisher(auto=True)
    writer = _writer(publisher, rate=20_000, stopping=waits, monotonic=_frozen)
    writer.spread(1000, 10.0)
    writer([(f"id-{n}", 1_700_000_000_000) for n in range(1000)])
    assert len(publisher.published) == 1000
    # Five batches of 200, each due 2 s after the one before (the waits returned at once).
    assert waits.waits == pytest.approx([2.0, 4.0, 6.0, 8.0, 10.0])


def test_a_spread_never_goes_faster_than_the_rate_nor_slower_than_the_floor() -> None:
    waits = _RecordedWaits()
    writer = _writer(rate=400, stopping=waits, monotonic=_frozen)
    writer.spread(1_000_000, 1.0)  # would be a million a second: the rate caps it
    writer([(f"id-{n}", 1) for n in range(400)])
    assert waits.waits == pytest.approx([0.5, 1.0])  # two batches of 200 at 400 a second
    later = _RecordedWaits()
    writer = _writer(rate=400, stopping=later, monotonic=_frozen)
    writer.spread(1, 3600.0)  # one id over an hour: the floor (50 a second) sends it at once
    writer([("x", 1)])
    assert later.waits == pytest.approx([1 / 50])

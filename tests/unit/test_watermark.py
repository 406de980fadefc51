"""The ingest watermark: probes of Kafka's ends against what ingest applied."""

from __future__ import annotations

from chronos.clock import FakeClock
from chronos.node.watermark import IDLE_PROBE_MS, IngestWatermark, WatermarkProbe


def test_nothing_may_be_delivered_before_a_probe_was_applied() -> None:
    mark = IngestWatermark({0: 5}, margin_ms=100)
    assert mark.value is None
    assert mark.horizon(10_000) == 0


def test_watermark_moves_to_the_probe_time_once_every_partition_reached_its_end() -> None:
    mark = IngestWatermark({0: 5, 1: 0}, margin_ms=100)
    mark.probed(1_000, {0: 7, 1: 3})
    assert mark.value is None
    mark.applied({0: 7})
    assert mark.value is None  # partition 1 still behind
    mark.applied({1: 3})
    assert mark.value == 1_000
    # Delivery may cover the margin past the watermark, never past now.
    assert mark.horizon(5_000) == 1_100
    assert mark.horizon(1_050) == 1_050


def test_newest_applied_probe_wins_and_older_ones_are_dropped() -> None:
    mark = IngestWatermark({0: 0}, margin_ms=0)
    mark.probed(1_000, {0: 2})
    mark.probed(1_050, {0: 4})
    mark.probed(1_100, {0: 9})
    mark.applied({0: 5})
    assert mark.value == 1_050
    mark.applied({0: 9})
    assert mark.value == 1_100


def test_lower_applied_offsets_never_move_it_back() -> None:
    mark = IngestWatermark({0: 10}, margin_ms=0)
    mark.applied({0: 3})
    mark.probed(500, {0: 10})
    assert mark.value == 500


def test_append_times_move_it_past_the_last_probe_while_records_come() -> None:
    """A record the broker appended at t proves every earlier record of its partition read:
    the watermark follows ingest without waiting for the next probe."""
    mark = IngestWatermark({0: 0}, margin_ms=100)
    mark.applied({0: 5}, {0: 900})
    assert mark.value is None  # nothing before a first probe: it proves the partitions read
    mark.probed(1_000, {0: 5})
    assert mark.value == 1_000
    mark.applied({0: 9}, {0: 1_400})
    assert mark.value == 1_400
    assert mark.horizon(2_000) == 1_500
    mark.applied({0: 12}, {0: 1_300})  # an earlier time never moves it back
    assert mark.value == 1_400


def test_a_quiet_partition_holds_it_at_its_probes() -> None:
    mark = IngestWatermark({}, margin_ms=0, partitions=[0, 1])
    mark.probed(1_000, {0: 0, 1: 0})
    assert mark.value == 1_000
    mark.applied({0: 50}, {0: 3_000})
    assert mark.value == 1_000  # partition 1 proves nothing past its last probe
    mark.probed(2_000, {0: 50, 1: 0})
    assert mark.value == 2_000
    mark.applied({1: 4}, {1: 2_500})
    assert mark.value == 2_500  # both partitions read past 2,500 now


def test_probe_failure_holds_the_watermark() -> None:
    clock = FakeClock(2_000)
    mark = IngestWatermark({0: 4}, margin_ms=0)
    answers: list[dict[int, int] | Exception] = [{0: 4}, RuntimeError("broker down")]

    def list_ends() -> dict[int, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    probe = WatermarkProbe(mark, list_ends, clock, interval_ms=1)
    probe.step()
    assert mark.value == 2_000
    clock.advance(1_000)
    probe.step()
    assert mark.value == 2_000


def test_no_probe_while_append_times_keep_the_watermark_fresh() -> None:
    clock = FakeClock(10_000)
    mark = IngestWatermark({0: 0}, margin_ms=100)
    asked: list[int] = []

    def list_ends() -> dict[int, int]:
        asked.append(clock.now_ms())
        return {0: mark._applied.get(0, 0)}

    probe = WatermarkProbe(mark, list_ends, clock, interval_ms=50)
    probe.step()  # the first probe: nothing proves anything before it
    assert asked == [10_000] and mark.value == 10_000
    clock.advance(30)
    mark.applied({0: 5}, {0: 10_020})
    mark.want(10_200)  # delivery waits for a slot past the horizon
    probe.step()
    assert asked == [10_000]  # 10 ms old: records prove more than a probe would
    clock.advance(100)  # records stopped: the watermark ages past the interval
    probe.step()
    assert asked == [10_000, 10_130] and mark.value == 10_130


def test_an_idle_gate_asks_kafka_once_per_idle_period_and_at_once_for_a_due_slot() -> None:
    """Probes follow demand: nothing wanted, one probe per ``IDLE_PROBE_MS`` (so that a
    silent Kafka still shows in /readyz); a due slot the horizon does not reach is probed
    for at once. Mutants caught: a probe every interval while idle, a want ignored."""
    clock = FakeClock(10_000)
    mark = IngestWatermark({0: 0}, margin_ms=100)
    asked: list[int] = []

    def list_ends() -> dict[int, int]:
        asked.append(clock.now_ms())
        return {0: 0}

    probe = WatermarkProbe(mark, list_ends, clock, interval_ms=50)
    probe.step()
    assert asked == [10_000]
    clock.advance(IDLE_PROBE_MS - 5)
    probe.step()  # nothing wanted: waits out the idle period (5 ms here), asks nothing
    assert asked == [10_000]
    mark.want(10_000 + IDLE_PROBE_MS)  # due now, 895 ms past the horizon
    probe.step()
    assert asked == [10_000, 10_000 + IDLE_PROBE_MS - 5]
    assert mark.horizon(clock.now_ms()) == clock.now_ms()
    clock.advance(IDLE_PROBE_MS)
    probe.step()  # the idle period passed: asked again with nothing wanted
    assert asked[-1] == clock.now_ms()


def test_a_probe_is_due_a_margin_before_the_slot_wanted() -> None:
    """A probe at ``slot - margin`` makes the horizon reach ``slot`` in time; sooner than
    ``interval`` after the watermark never; a slot reached already wants nothing."""
    mark = IngestWatermark({0: 0}, margin_ms=250)
    assert mark.next_probe_ms(50) is None  # no watermark yet: at once
    mark.probed(10_000, {0: 0})
    assert mark.next_probe_ms(50) == 10_000 + IDLE_PROBE_MS
    mark.want(10_200)  # within the margin already: nothing to ask
    assert mark.next_probe_ms(50) == 10_000 + IDLE_PROBE_MS
    mark.want(10_600)
    assert mark.next_probe_ms(50) == 10_350
    mark.want(10_260)  # an earlier one: due at once, not sooner than the interval
    assert mark.next_probe_ms(50) == 10_050
    mark.probed(10_300, {0: 0})  # reaches 10,550: the 10,260 is served, the 10,600 too
    assert mark.next_probe_ms(50) == 10_300 + IDLE_PROBE_MS


def test_a_batch_without_cancels_counts_once_read_one_with_a_cancel_once_applied() -> None:
    """The decoder's view moves the gate while nothing can be cancelled by what is unread or
    unapplied; a cancel or reschedule holds it, and whatever was read after, until applied."""
    mark = IngestWatermark({0: 0}, margin_ms=0, clock=FakeClock(10_000))
    mark.probed(1_000, {0: 0})
    mark.read({0: 10}, {0: 2_000}, hazard=False)
    assert mark.value == 2_000  # read, not yet written: its adds are only late until then
    mark.read({0: 20}, {0: 3_000}, hazard=True)
    mark.read({0: 30}, {0: 4_000}, hazard=False)
    assert mark.value == 2_000  # the cancel, and what came after it, wait for the write
    mark.read({0: 20}, {0: 3_000}, hazard=True)  # told again (a merged batch): no change
    mark.applied({0: 10}, {0: 2_000})
    assert mark.value == 2_000
    mark.applied({0: 20}, {0: 3_000})
    assert mark.value == 4_000  # the cancel is in the store: the batch after it counts


def test_a_broker_clock_seen_ahead_is_taken_off_every_append_time() -> None:
    """A record read at node time 10,000 that says it was appended at 10,500: the broker's
    clock is at least 500 ms ahead, so that much comes off this and every later time."""
    clock = FakeClock(10_000)
    mark = IngestWatermark({0: 0}, margin_ms=0, clock=clock)
    mark.probed(9_000, {0: 0})
    mark.read({0: 5}, {0: 10_500}, hazard=False)
    assert mark.value == 10_000
    clock.advance(1_000)
    mark.applied({0: 6}, {0: 10_900})
    assert mark.value == 10_400  # 10,900 less the 500 ms lead seen


def test_each_partition_has_its_own_horizon_a_lagging_one_holds_only_its_own() -> None:
    """A cluster member's lanes deliver one partition each: a partition whose probe end is
    not applied yet holds its own lane, not the others'. Mutant caught: the horizon over
    every partition (a restored partition held every lane of the member)."""
    mark = IngestWatermark({0: 5, 1: 0}, margin_ms=100)
    mark.probed(1_000, {0: 5, 1: 3})
    assert mark.value is None and mark.horizon(5_000) == 0  # partition 1 behind its end
    assert mark.horizon_of(0, 5_000) == 1_100
    assert mark.horizon_of(1, 5_000) == 0
    mark.applied({1: 3})
    assert mark.horizon_of(1, 5_000) == 1_100 and mark.value == 1_000


def test_proofs_carried_from_an_earlier_gate_hold_at_once_new_partitions_wait_a_probe() -> None:
    """A member's ingest started again over more partitions (a restore done): what the old
    gate proved about the store still holds, so those lanes go on; the new partition waits for
    a probe. Mutants caught: nothing carried (every lane held until the new ingest caught
    up), a carried proof taken for a partition the old gate did not cover."""
    old = IngestWatermark({0: 5}, margin_ms=100)
    old.probed(1_000, {0: 5})
    old.applied({0: 9}, {0: 1_400})
    new = IngestWatermark({0: 9, 1: 4}, margin_ms=100, carried=old.proofs())
    assert new.horizon_of(0, 5_000) == 1_500
    assert new.horizon_of(1, 5_000) == 0
    assert new.value is None
    new.probed(2_000, {0: 12, 1: 4})  # partition 0 got records meanwhile: not applied yet
    assert new.horizon_of(1, 5_000) == 2_100
    assert new.horizon_of(0, 5_000) == 1_500 and new.value == 1_400
    new.applied({0: 12}, {0: 1_900})
    assert new.horizon_of(0, 5_000) == 2_100 and new.value == 2_000

"""Repeats, past due times, cancels of repeats, and what the store keeps after delivery."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.store import keys
from chronos.wire import H_SKIPPED
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, running_node, wait_until

#: The inner partitions ``make_settings`` gives a node.
PARTITIONS = 4


@pytest.mark.embedded
def test_fixed_repeat_delivers_each_occurrence_on_time(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-ticks"
    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        receipt = client.send_delay(
            topic, b"tick", delay=0.3, repeat=Repeat(RepeatKind.FIXED, 1000, 3)
        )
        wait_until(lambda: inbox.count(receipt.id) >= 3, 60, "three occurrences came")
        # A fourth would be due at +3000 ms: it would come before markers due after it.
        inbox.settle(client, topic, PARTITIONS, deliver_at_ms=receipt.deliver_at_ms + 3_500)
        deliveries = sorted(inbox.by_id[receipt.id], key=lambda d: d.occurrence)
    assert [d.occurrence for d in deliveries] == [1, 2, 3]
    assert [d.due_ms - receipt.deliver_at_ms for d in deliveries] == [0, 1000, 2000]
    assert all(d.produced_ms >= d.due_ms for d in deliveries)


def test_repeat_far_in_the_past_catching_up_latest_collapses_then_keeps_schedule(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-overdue"
    hour_ago = int(time.time() * 1000) - 3_600_000
    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        receipt = client.send_delay(
            topic,
            b"beat",
            deliver_at=hour_ago,
            repeat=Repeat(RepeatKind.FIXED, 1000, 5000, catch_up=CatchUp.LATEST),
        )
        wait_until(lambda: inbox.count(receipt.id) >= 2, 60, "two occurrences came")
        # Null keys spread over partitions: order by occurrence, not by arrival.
        first, second = sorted(inbox.by_id[receipt.id], key=lambda d: d.occurrence)[:2]
        client.cancel(receipt.id)
        # Two more occurrences would be due before markers due 2.5 s after the cancel.
        inbox.settle(client, topic, PARTITIONS, deliver_at_ms=int(time.time() * 1000) + 2_500)
        after_cancel = inbox.count(receipt.id)
    # One delivery for the 3,600 overdue occurrences, numbered as the latest one due...
    assert 3590 <= first.occurrence <= 3610
    skipped = dict(first.headers)[H_SKIPPED]
    assert skipped is not None and int(skipped) == first.occurrence - 1
    # ...then the schedule goes on from there, one per second, and the cancel stops it.
    assert second.occurrence == first.occurrence + 1
    assert second.due_ms - first.due_ms == 1000
    assert after_cancel <= 3


def test_past_due_time_means_deliver_now(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-now"
    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        sent_ms = int(time.time() * 1000)
        receipt = client.send_delay(topic, b"late", deliver_at=sent_ms - 60_000)
        # Delivered now, not a minute later (as a due time read as a delay would be): before
        # markers due in 5 s.
        inbox.settle(client, topic, PARTITIONS, deliver_at_ms=sent_ms + 5_000)
        assert inbox.count(receipt.id) == 1
        got = inbox.first(receipt.id)
    assert got.due_ms == sent_ms - 60_000
    assert got.produced_ms >= sent_ms


def test_delete_worker_drops_delivered_data(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", delete={"interval_s": 0.2, "retention_s": 0}
    )
    topic = f"{namespace}-gone"
    with (
        running_node(settings) as node,
        Inbox(settings, [topic]) as inbox,
        DelayClient(settings) as client,
    ):
        ids = {client.send_delay(topic, b"x", delay=0.1).id for _ in range(50)}
        later = client.send_delay(topic, b"later", delay=60).id
        assert inbox.wait_for(ids)
        assert node.context is not None
        store = node.context.store
        rows: list[tuple[bytes, bytes]] = []

        def only_one_left() -> bool:
            rows[:] = store.scan(b"", keys.slot_bound(keys.MAX_MS), 1000)
            return len(rows) == 1

        wait_until(only_one_left, 60, "the delete worker dropped the delivered messages")
        remaining = [keys.split_message_key(k)[1] for k, _ in rows]
        index = store.get_index([*ids, later])
    assert remaining == [later], "delivered messages were not deleted, or a pending one was"
    assert index[-1] is not None and all(v is None for v in index[:-1])


def test_repeat_occurrences_missed_while_the_node_was_down_are_each_delivered_once(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """The default catch-up: a stop (or a failover) longer than the interval must not fold the
    occurrences that fell due meanwhile into one."""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-catch-up"
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        with running_node(settings):
            receipt = client.send_delay(
                topic, b"tick", delay=0.3, repeat=Repeat(RepeatKind.FIXED, 1000, 10)
            )
            wait_until(lambda: inbox.count(receipt.id) >= 2, 60, "two occurrences came")
        # Occurrences fall due while no node runs (a deliberate downtime, not a wait for speed).
        down_ms = int(time.time() * 1000)
        wait_until(lambda: time.time() * 1000 > down_ms + 3_500, 60, "3.5 s of downtime")
        with running_node(settings):
            wait_until(lambda: inbox.count(receipt.id) >= 10, 60, "all ten occurrences came")
            # An eleventh would be due at +10,000 ms: before markers due after it.
            inbox.settle(client, topic, PARTITIONS, deliver_at_ms=receipt.deliver_at_ms + 10_500)
        deliveries = sorted(inbox.by_id[receipt.id], key=lambda d: d.occurrence)
    assert [d.occurrence for d in deliveries] == list(range(1, 11))
    assert [d.due_ms - receipt.deliver_at_ms for d in deliveries] == [1000 * k for k in range(10)]
    assert all(d.produced_ms >= d.due_ms for d in deliveries)

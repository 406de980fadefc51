"""Repeats, past due times, cancels of repeats, and what the store keeps after delivery."""

from __future__ import annotations

import time
from pathlib import Path

from chronos.repeat import CatchUp, Repeat, RepeatKind
from chronos.store import keys
from chronos.wire import H_SKIPPED
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, running_node


def test_fixed_repeat_delivers_each_occurrence_on_time(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-ticks"
    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        receipt = client.send_delay(
            topic, b"tick", delay=0.3, repeat=Repeat(RepeatKind.FIXED, 1000, 3)
        )
        deadline = time.monotonic() + 10
        while inbox.count(receipt.id) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.2)  # a fourth occurrence would show up by now
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
        deadline = time.monotonic() + 10
        while inbox.count(receipt.id) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Null keys spread over partitions: order by occurrence, not by arrival.
        first, second = sorted(inbox.by_id[receipt.id], key=lambda d: d.occurrence)[:2]
        client.cancel(receipt.id)
        time.sleep(2.0)
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
        assert inbox.wait_for({receipt.id}, timeout_s=5)
        got = inbox.first(receipt.id)
    assert got.due_ms == sent_ms - 60_000
    assert got.produced_ms - sent_ms < 2000


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
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = store.scan(b"", keys.slot_bound(keys.MAX_MS), 1000)
            if len(rows) == 1:
                break
            time.sleep(0.1)
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
            deadline = time.monotonic() + 10
            while inbox.count(receipt.id) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
        time.sleep(3.5)  # three or four occurrences fall due while no node runs
        with running_node(settings):
            deadline = time.monotonic() + 20
            while inbox.count(receipt.id) < 10 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
        deliveries = sorted(inbox.by_id[receipt.id], key=lambda d: d.occurrence)
    assert [d.occurrence for d in deliveries] == list(range(1, 11))
    assert [d.due_ms - receipt.deliver_at_ms for d in deliveries] == [1000 * k for k in range(10)]
    assert all(d.produced_ms >= d.due_ms for d in deliveries)

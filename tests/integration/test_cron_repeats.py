"""Cron repeats through a node: fires on the expression's times in its zone, as many as asked."""

from __future__ import annotations

from pathlib import Path

from chronos.repeat import Repeat
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, running_node, wait_until


def test_a_cron_repeat_fires_on_whole_seconds_and_stops_after_its_times(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-cron"
    every_second = Repeat.calendar("* * * * * *", "Asia/Kolkata", times=3)
    with running_node(settings), Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        receipt = client.send_delay(topic, b"tick", delay=0, repeat=every_second)
        first = receipt.deliver_at_ms
        wait_until(lambda: inbox.count(receipt.id) >= 3, 60, "three occurrences arrived")
        # A fourth occurrence would be due at first + 3000: a message due after it, once
        # delivered, shows that none came.
        marker = client.send_delay(topic, b"after", deliver_at=first + 3_500)
        wait_until(lambda: inbox.count(marker.id) == 1, 60, "the marker arrived")
        deliveries = sorted(inbox.by_id[receipt.id], key=lambda d: d.occurrence)
    assert first % 1000 == 0, "the first occurrence is the first fire, on a whole second"
    assert [d.occurrence for d in deliveries] == [1, 2, 3]
    assert [d.due_ms - first for d in deliveries] == [0, 1000, 2000]
    assert all(d.produced_ms >= d.due_ms for d in deliveries)

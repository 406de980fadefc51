"""An acknowledged cancel wins over a lagging ingest: delivery waits for the cancel gate."""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from chronos.model import DecodedRequest, Op
from chronos.node.ingest import IngestTarget, IngestWorker
from chronos.runtime.node import Node
from proxy.client import DelayClient
from tests.integration.harness import (
    INNER_PARTITIONS,
    Group,
    Inbox,
    make_settings,
    running_node,
    wait_until,
)

_STALL_S = 5.0
_DUE_IN_MS = 3000


class _StallingCancels:
    """The node's ledger, except that a batch holding a cancel is applied ``_STALL_S`` late:
    ingest falls behind exactly when it matters (as in a burst, or after a broker outage)."""

    def __init__(self, ledger: IngestTarget) -> None:
        self._ledger = ledger
        self.stalled = threading.Event()
        #: Ids of the adds applied so far.
        self.added: set[str] = set()

    def apply_decoded(self, items: list[DecodedRequest], *args: Any) -> Any:
        if any(op is Op.CANCEL for op, _id, _due, _value in items):
            self.stalled.set()
            time.sleep(_STALL_S)
        applied = self._ledger.apply_decoded(items, *args)
        self.added.update([message_id for op, message_id, _due, _value in items if op is Op.ADD])
        return applied

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


def _stall_cancels(node: Node) -> _StallingCancels:
    worker = node.component(IngestWorker)
    assert worker is not None
    stalling = _StallingCancels(worker._ledger)
    worker._ledger = stalling  # type: ignore[assignment]  # fault injection
    return stalling


def _doomed_and_kept(
    client: DelayClient, topic: str, stalling: _StallingCancels
) -> tuple[str, str, int]:
    """Two messages due in 3 s; the first cancelled well before its due time, once ingest
    applied both (so the cancel comes in a later batch, and only it stalls). A machine too
    loaded to acknowledge the cancel 500 ms before it (a shared CI machine once took 1.3 s for
    three requests) tries a fresh pair with a longer lead: only the last pair is checked (an
    earlier one's cancel came too late to promise anything)."""
    for lead_ms in (_DUE_IN_MS, 4 * _DUE_IN_MS, 20 * _DUE_IN_MS):
        due_ms = int(time.time() * 1000) + lead_ms
        doomed = client.send_delay(topic, b"order-timeout", deliver_at=due_ms)
        kept = client.send_delay(topic, b"kept", deliver_at=due_ms)
        wait_until(partial({doomed.id, kept.id}.issubset, stalling.added), 60, "adds applied")
        client.cancel(doomed.id)
        if int(time.time() * 1000) < due_ms - 500:
            return doomed.id, kept.id, due_ms
    pytest.fail("no cancel was acknowledged 500 ms before its due time, even 60 s ahead")


@pytest.mark.embedded
def test_cancel_acknowledged_before_due_is_never_delivered_while_ingest_lags(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        node={"ingest_threads": 1, "cancel_margin_ms": 100},
    )
    topic = f"{namespace}-gate"
    with running_node(settings) as node, Inbox(settings, [topic]) as inbox:
        stalling = _stall_cancels(node)
        with DelayClient(settings) as client:
            doomed, kept, due_ms = _doomed_and_kept(client, topic, stalling)
            assert stalling.stalled.wait(60)
            # The kept message goes out once ingest applied the cancel's batch: late, not wrong.
            assert inbox.wait_for({kept}, timeout_s=60)
            inbox.settle(client, topic, INNER_PARTITIONS)  # the doomed one would come first
        assert inbox.count(doomed) == 0
        lateness_ms = inbox.first(kept).produced_ms - due_ms
    assert lateness_ms > 0


@pytest.mark.kafka_only(reason="a read_committed consumer must not see aborted records")
def test_a_group_master_waits_for_its_ingest_too(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    group = Group(kafka_bootstrap, namespace, tmp_path)
    try:
        master = group.start("a")
        wait_until(lambda: group.masters() == ["a"], 60, "a is master")
        assert master.wait_ready(60)
        topic = f"{namespace}-gate"
        with Inbox(master.settings, [topic]) as inbox:
            stalling = _stall_cancels(master)
            with DelayClient(master.settings) as client:
                doomed, kept, _due_ms = _doomed_and_kept(client, topic, stalling)
                assert stalling.stalled.wait(60)
                assert inbox.wait_for({kept}, timeout_s=60)
                inbox.settle(client, topic, INNER_PARTITIONS)  # the doomed one would come first
            assert inbox.count(doomed) == 0
    finally:
        group.stop_all()


@pytest.mark.kafka_only(
    reason="Tansu keeps the producer's time on every record: no append time proves anything"
)
def test_records_appended_after_the_last_probe_carry_delivery_on(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """Probes ten minutes apart: after the first, only the broker's append times of the
    records ingest applies can move the watermark. Delivery keeps going while records come,
    and a cancel acknowledged before the due time still wins (it was appended, and so
    applied, before any record whose time lets the due slot go)."""
    settings = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        topics={"inner_partitions": 1},
        node={"ingest_threads": 1, "watermark_interval_ms": 600_000},
    )
    topic = f"{namespace}-appended"
    with (
        running_node(settings),
        Inbox(settings, [topic]) as inbox,
        DelayClient(settings) as client,
    ):
        due_ms = int(time.time() * 1000) + _DUE_IN_MS
        kept = client.send_delay(topic, b"kept", deliver_at=due_ms)
        doomed = client.send_delay(topic, b"doomed", deliver_at=due_ms)
        client.cancel(doomed.id)
        assert int(time.time() * 1000) < due_ms - 500, "the cancel was acknowledged too late"
        stop = threading.Event()

        def traffic() -> None:
            with DelayClient(settings) as other:
                while not stop.wait(0.1):
                    other.send_delay(topic, b"later", delay=3600)

        feeder = threading.Thread(target=traffic, daemon=True)
        feeder.start()
        try:
            assert inbox.wait_for({kept.id}, timeout_s=60), "delivery waited for a probe"
        finally:
            stop.set()
            feeder.join(30)
        assert inbox.count(doomed.id) == 0

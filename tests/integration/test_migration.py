"""``chronos topics migrate`` on Apache Kafka (issue 38): a node run in refresh mode leaves an
inner topic whose last records do not state its store (null-valued cancels and reschedules,
adds of ids it forgot); after the migration, each id's last record (what the cleaner keeps)
states what the store held, the forgotten id's last record is a tombstone, the topic is
compacted, and the node restarted in compact mode on a wiped store restores the same state.

The cleaner itself is not waited for: the test keeps what it would (each id's last record,
unless null), as ``test_compacted_topic.py`` does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chronos import wire
from chronos.clock import SystemClock
from chronos.kafka.clients import KafkaClients
from chronos.kafka.partitioner import partition_of
from chronos.kafka.topic_config import read_topic_config
from chronos.runtime.migration import migrate_to_compact
from chronos.runtime.node import Node
from chronos.schedule import restatement
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, wait_until
from tests.integration.test_compacted_topic import _header, _held, _kept, _last_records

pytestmark = pytest.mark.kafka_only(reason="Tansu does not compact")

HOUR_S = 3600.0


def test_a_refresh_mode_store_migrated_to_compact_mode_is_stated_by_the_topic(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    forgetful = {"retention_s": 1.0, "interval_s": 0.5}
    refresh = make_settings(kafka_bootstrap, namespace, store, delete=forgetful)
    compact = make_settings(
        kafka_bootstrap, namespace, store, delete=forgetful, rebuild={"mode": "compact"}
    )
    topic = f"{namespace}-target"
    ids = ["dup", "cancelled", "dropped", "moved", "null", "plain", "gone"]
    node = Node(refresh)
    node.start()
    try:
        assert node.wait_ready(60)
        with Inbox(refresh, [topic]) as inbox, DelayClient(refresh) as client:
            client.send_delay(topic, b"first", delay=HOUR_S, id="dup")
            client.send_delay(topic, b"second", delay=2 * HOUR_S, id="dup")
            client.cancel("cancelled")
            client.send_delay(topic, b"never", delay=1.0, id="cancelled")
            client.send_delay(topic, b"d", delay=HOUR_S, id="dropped")
            client.cancel("dropped")
            client.send_delay(topic, b"m", delay=HOUR_S, id="moved")
            client.reschedule("moved", delay=2 * HOUR_S)
            client.send_delay(topic, None, delay=HOUR_S, id="null")
            client.send_delay(topic, b"p", delay=HOUR_S, id="plain")
            client.send_delay(topic, b"g", delay=0.1, id="gone")
            assert inbox.wait_for({"gone"}, 60)
            # An idle push worker moves the seek every 30 s at most: a later delivery moves it
            # past gone's slot plus retention now, and the next delete pass forgets gone.
            client.send_delay(topic, b"t", delay=1.5, id="tick")
            assert inbox.wait_for({"tick"}, 60)
            wait_until(lambda: _held(node, ["gone"])["gone"] is None, 60, "gone is forgotten")
            held = _held(node, [*ids, "tick"])  # tick: forgotten too, or not yet
            live = {i for i, state in held.items() if state is not None}
            cancels = {"cancelled", "dropped"}
            node.stop()

            migrated = migrate_to_compact(compact, SystemClock())

            assert (migrated.messages, migrated.cancels) == (len(live - cancels), len(cancels))
            assert migrated.tombstones == len({"gone", "tick"} - live)
            assert migrated.topic_changes.get("cleanup.policy") == "compact"
            config = read_topic_config(
                KafkaClients(compact.kafka, "test").admin(), compact.topics.names.inner, 30
            )
            assert config is not None and config["cleanup.policy"] == "compact"
            records = _last_records(compact)
            kept = _kept(records)
            for message_id, rs in records.items():
                assert {r[0] for r in rs} == {partition_of(message_id.encode(), 4)}, message_id
            assert set(kept) == live and "gone" not in live
            assert kept["dup"][1] == b"first", "the first add wins, in the topic too"
            assert kept["null"][1] == b"" and _header(kept["null"], wire.H_NULL_VALUE) == b"1"
            moved = held["moved"]
            assert isinstance(moved, restatement.Restatement)
            assert _header(kept["moved"], wire.H_SLOT) == str(moved.slot_ms).encode()
            for cancelled in ("cancelled", "dropped"):
                assert _header(kept[cancelled], wire.H_CANCELLED) is not None, cancelled

            kept_held = {i: held[i] for i in ids}
            shutil.rmtree(store)
            node = Node(compact)
            node.start()
            assert node.wait_ready(60)
            try:
                # Not tick: delivered inside a retention of 1 s, restored and forgotten again.
                wait_until(lambda: _held(node, ids) == kept_held, 60, "the store holds it")
            except AssertionError:
                assert _held(node, ids) == kept_held  # says what differs
                raise
            client.send_delay(topic, b"a", delay=0.1, id="after")
            assert inbox.wait_for({"after"}, 60)
            assert inbox.count("gone") == 1 and inbox.count("cancelled") == 0
    finally:
        node.stop()

"""Replica groups on the real broker: election, fencing, takeover and progress following.

Two nodes of one group run in this process (separate stores, node ids and Kafka clients); the
failover script (scripts/failover_check.py) does the same with processes and kill -9. Exactly
once for ``read_committed`` consumers needs a broker that hides aborted records: Apache Kafka.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest
from confluent_kafka import Producer

from chronos.group.replica import Replica
from chronos.group.spec import GroupSpec
from chronos.group.status import group_status
from chronos.kafka.clients import KafkaClients
from chronos.repeat import Repeat, RepeatKind
from chronos.store import codec, keys
from proxy.client import DelayClient
from tests.integration.harness import GROUP, Group, Inbox, role_of
from tests.integration.harness import wait_until as _wait

#: The inner partitions of the test group's nodes (``make_settings``).
PARTITIONS = 4

pytestmark = pytest.mark.kafka_only(
    reason="exactly once for read_committed consumers needs aborted records hidden"
)


def _send(client: DelayClient, topic: str, count: int, delay_s: float, prefix: str) -> set[str]:
    return {
        client.send_delay(topic, f"{prefix}{i}", delay=delay_s, id=f"{prefix}{i}").id
        for i in range(count)
    }


def _exactly_once(inbox: Inbox, client: DelayClient, topic: str, ids: set[str]) -> None:
    """Every id delivered once, never early; duplicates would come before markers sent now."""
    assert inbox.wait_for(ids, 60), f"missing: {sorted(ids - inbox.by_id.keys())[:5]}"
    inbox.settle(client, topic, PARTITIONS)
    twice = sorted(i for i in ids if inbox.count(i) > 1)
    assert not twice, f"delivered more than once: {twice[:5]}"
    for message_id in ids:
        first = inbox.first(message_id)
        assert first.produced_ms >= first.due_ms, f"{message_id} delivered early"


def test_one_replica_is_elected_and_a_stopped_master_hands_over_without_loss_or_duplicate(
    group: Group, kafka_bootstrap: str, namespace: str
) -> None:
    a = group.start("a")
    _wait(lambda: group.masters() == ["a"], 60, "a is master")
    group.start("b")
    topic = f"{namespace}-target"
    settings = a.settings
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        first = _send(client, topic, 30, 0.3, "before-")
        assert inbox.wait_for(first, 60)
        _wait(lambda: role_of(group.nodes["b"]) == "backup", 60, "b stays a backup")
        assert group.masters() == ["a"], "a backup joining took the role from a live master"
        spec = GroupSpec.of(settings)
        assert spec is not None
        clients = KafkaClients(settings.kafka, "test")
        # b stands for election once it is complete and caught up; its join takes a rebalance.
        _wait(lambda: len(group_status(spec, clients).members) == 2, 60, "b joined the election")
        status = group_status(spec, clients)
        assert status.master == "a" and status.term == 1
        assert sorted(m.node for m in status.members) == ["a", "b"]
        later = _send(client, topic, 30, 1.5, "across-")
        a.stop()
        _wait(lambda: group.masters() == ["b"], 60, "b took over")
        after = _send(client, topic, 30, 0.2, "after-")
        _exactly_once(inbox, client, topic, first | later | after)


def test_a_fenced_master_stops_and_turns_into_a_backup_without_a_restart(
    group: Group, kafka_bootstrap: str, namespace: str
) -> None:
    a = group.start("a")
    _wait(lambda: group.masters() == ["a"], 60, "a is master")
    replica = a.replica
    assert isinstance(replica, Replica)
    term = replica.term
    topic = f"{namespace}-target"
    with Inbox(a.settings, [topic]) as inbox, DelayClient(a.settings) as client:
        ids = _send(client, topic, 20, 0.2, "x-")
        assert inbox.wait_for(ids, 60)
        # A second producer with the group's transactional.id: what a new master does first.
        usurper = Producer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "transactional.id": a.settings.topics.names.transactional_id(GROUP),
            }
        )
        usurper.init_transactions(30)
        more = _send(client, topic, 20, 0.1, "y-")
        context = a.context
        assert context is not None
        _wait(lambda: context.metrics.totals().get("demotions", 0) >= 1, 60, "a was demoted")
        assert context.metrics.totals().get("fenced", 0) >= 1
        # Still elected, it takes over again with the next term, fencing the usurper in turn.
        _wait(lambda: replica.role == "master" and replica.term > term, 60, "a leads again")
        _exactly_once(inbox, client, topic, ids | more)


def test_a_backup_follows_the_committed_progress_and_continues_a_repeat_after_takeover(
    group: Group, kafka_bootstrap: str, namespace: str
) -> None:
    a = group.start("a")
    _wait(lambda: group.masters() == ["a"], 60, "a is master")
    b = group.start("b")
    topic = f"{namespace}-target"
    repeat = Repeat(RepeatKind.FIXED, interval_ms=3000, times=3)
    with Inbox(a.settings, [topic]) as inbox, DelayClient(a.settings) as client:
        rep = client.send_delay(topic, b"r", delay=0.3, id="rep", repeat=repeat)
        ids = _send(client, topic, 20, 0.3, "f-")
        assert inbox.wait_for(ids | {"rep"}, 60)
        assert b.context is not None
        ledger, store = b.context.ledger, b.context.store

        def followed() -> bool:
            key = keys.pending_key(store.get_index(["rep"])[0])
            if key is None:
                return False
            raw = store.get_messages([key])[0]
            return raw is not None and codec.decode(raw).occurrence == 2

        _wait(followed, 60, "the backup holds the repeat's next occurrence")
        assert ledger.seek_ms >= inbox.first("rep").due_ms, "the backup's seek did not follow"
        a.stop()
        _wait(lambda: group.masters() == ["b"], 60, "b took over")
        _wait(lambda: inbox.count("rep") >= 3, 60, "every occurrence arrived")
        # A fourth occurrence would be due at +9 s: before markers due after it.
        inbox.settle(client, topic, PARTITIONS, deliver_at_ms=rep.deliver_at_ms + 9_500)
        with inbox._lock:
            occurrences = sorted(d.occurrence for d in inbox.by_id["rep"])
        assert occurrences == [1, 2, 3]
        _exactly_once(inbox, client, topic, ids)


def test_an_undeliverable_record_is_dead_lettered_inside_the_transaction(
    group: Group, kafka_bootstrap: str, namespace: str, admin: Any
) -> None:
    from confluent_kafka.cimpl import NewTopic

    a = group.start("a")
    _wait(lambda: group.masters() == ["a"], 60, "a is master")
    topic, small = f"{namespace}-target", f"{namespace}-small"
    admin.create_topics([NewTopic(small, 1, 1, config={"max.message.bytes": "2000"})])[
        small
    ].result(30)
    dead = a.settings.topics.names.dead_letter
    with ExitStack() as stack:
        inbox = stack.enter_context(Inbox(a.settings, [topic]))
        dlq = stack.enter_context(Inbox(a.settings, [dead], partitions=1))
        client = stack.enter_context(DelayClient(a.settings))
        good = _send(client, topic, 10, 0.5, "ok-")
        client.send_delay(small, b"x" * 5000, delay=0.5, id="too-large")
        client.send_delay(f"{namespace}-missing", b"x", delay=0.5, id="no-topic")
        _exactly_once(inbox, client, topic, good)
        assert dlq.wait_for({"too-large", "no-topic"}, 60)
        # The dead-letter topic has one partition: a second dead letter of either would come
        # before one sent after them.
        client.send_delay(small, b"x" * 5000, delay=0, id="too-large-after")
        assert dlq.wait_for({"too-large-after"}, 60)
        assert dlq.count("too-large") == 1 and dlq.count("no-topic") == 1

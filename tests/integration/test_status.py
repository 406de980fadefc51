"""Where is my message, on Apache Kafka: every state through the node's admin API, the proxy's
HTTP route, the Python client and ``chronos status``; a cancel's answer told truthfully; and
the same answers from the new master after a failover."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.cimpl import NewTopic

from chronos.cli.main import main as chronos_main
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from proxy.http.server import ProxyServer
from tests.integration.harness import (
    Group,
    Inbox,
    make_settings,
    role_of,
    running_node,
    wait_until,
)

pytestmark = pytest.mark.kafka_only(reason="a too-large record is refused only by Apache Kafka")


def _with_nodes(settings: ChronosSettings, ports: list[int]) -> ChronosSettings:
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    return settings.model_copy(
        update={"proxy": settings.proxy.model_copy(update={"status_nodes": urls})}
    )


@contextmanager
def _proxy(settings: ChronosSettings) -> Iterator[httpx.Client]:
    """The HTTP proxy, served for real on a free port."""
    server = ProxyServer(
        settings.model_copy(update={"proxy": settings.proxy.model_copy(update={"port": 0})})
    )
    server.start()
    try:
        assert server.wait_started(10)
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=20) as http:
            yield http
    finally:
        server.stop()
        server.join(10)


def _small_topic(admin: Any, name: str) -> None:
    created = admin.create_topics([NewTopic(name, 1, 1, config={"max.message.bytes": "2000"})])
    created[name].result(30)


def _schedule_every_state(client: DelayClient, topic: str, small: str) -> None:
    client.send_delay(topic, b"later", delay=3600, id="pending")
    client.send_delay(topic, b"soon", delay=0.3, id="delivered")
    client.send_delay(small, b"x" * 5000, delay=0.3, id="dead")
    client.send_delay(topic, b"later", delay=3600, id="cancelled")
    client.send_delay(topic, b"soon", delay=0.3, id="late")


def _cancel_after_delivery(client: DelayClient) -> None:
    client.cancel("cancelled")  # removes a pending message
    client.cancel("late")  # delivered already: too late
    client.cancel("ghost")  # never scheduled


def _check_states(answer: Any, inbox: Inbox, with_offsets: bool) -> None:
    """Every state as ``answer(id)`` reports it, checked against what was consumed.
    ``with_offsets`` false: the answering node did not deliver them, so it has no outcomes
    (a dead letter shows as delivered with ``outcome_recorded`` false)."""
    pending = answer("pending")
    assert pending["state"] == "pending" and pending["occurrence"] == 1
    assert pending["due_ms"] > time.time() * 1000 + 3_000_000
    for message_id in ("delivered", "late"):
        seen = answer(message_id)
        assert seen["state"] == "delivered", seen
        consumed = inbox.first(message_id)
        assert seen["outcome_recorded"] is with_offsets
        if with_offsets:
            assert (seen["partition"], seen["offset"]) == (consumed.partition, consumed.offset)
    dead = answer("dead")
    if with_offsets:
        assert dead["state"] == "dead_lettered" and dead["dead_letter_reason"], dead
    else:
        assert (dead["state"], dead["outcome_recorded"]) == ("delivered", False), dead
    # A backup removes a cancelled message too, but cannot tell whether the master was
    # delivering it at that moment: it says so.
    assert answer("cancelled")["cancel"] == ("removed" if with_offsets else "removed_on_backup")
    assert answer("ghost")["cancel"] == "nothing_to_cancel"
    assert answer("never-sent")["state"] == "unknown"


def test_every_state_through_admin_proxy_client_and_cli(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, admin: Any, capsys: Any
) -> None:
    """Mutants caught: outcomes not recorded (no partition/offset), a too-late cancel
    reported as removed, a tombstone for an unknown id reported as removed."""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic, small = f"{namespace}-target", f"{namespace}-small"
    _small_topic(admin, small)
    with running_node(settings) as node, ExitStack() as stack:
        assert node.admin_port is not None
        settings = _with_nodes(settings, [node.admin_port])
        inbox = stack.enter_context(Inbox(settings, [topic]))
        client = stack.enter_context(DelayClient(settings))
        _schedule_every_state(client, topic, small)
        assert inbox.wait_for({"delivered", "late"}, 30)
        wait_until(lambda: client.status("dead")["state"] == "dead_lettered", 30, "dead-lettered")
        wait_until(lambda: client.status("late")["state"] == "delivered", 10, "seek passed")
        _cancel_after_delivery(client)
        wait_until(lambda: client.status("ghost")["state"] == "cancelled", 10, "cancels applied")

        _check_states(client.status, inbox, with_offsets=True)
        assert client.status("pending")["answered_by"]["role"] == "alone"
        admin_api = httpx.Client(base_url=f"http://127.0.0.1:{node.admin_port}", timeout=5)
        with admin_api:
            _check_states(
                lambda i: admin_api.get(f"/v1/messages/{i}").json(), inbox, with_offsets=True
            )
        with _proxy(settings) as proxy:
            _check_states(lambda i: proxy.get(f"/v1/messages/{i}").json(), inbox, True)
        node_url = f"http://127.0.0.1:{node.admin_port}"
        assert chronos_main(["status", "delivered", "--node", node_url]) == 0
        out = capsys.readouterr().out
        printed = json.loads(out[out.index("{\n") :])
        assert printed["partition"] == inbox.first("delivered").partition
        assert chronos_main(["status", "never-sent", "--node", node_url]) == 1
        capsys.readouterr()
    # The node is gone: a status question fails loudly instead of answering "unknown".
    with _proxy(settings) as proxy:
        gone = proxy.get("/v1/messages/pending")
        assert gone.status_code == 503 and "no node is ready" in gone.json()["error"]


def test_the_new_master_answers_every_state_after_a_failover(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, admin: Any
) -> None:
    """Every state again after the master stopped, from the backup that took over; and a
    message scheduled before and delivered after the failover has the new master's partition
    and offset."""
    topic, small = f"{namespace}-target", f"{namespace}-small"
    _small_topic(admin, small)
    group = Group(kafka_bootstrap, namespace, tmp_path)
    try:
        a = group.start("a")
        wait_until(lambda: group.masters() == ["a"], 30, "a is master")
        b = group.start("b")
        ports = [a.admin_port, b.admin_port]
        assert None not in ports
        settings = _with_nodes(a.settings, [p for p in ports if p is not None])
        with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
            _schedule_every_state(client, topic, small)
            client.send_delay(topic, b"across", delay=6, id="across")
            assert inbox.wait_for({"delivered", "late"}, 30)
            wait_until(lambda: client.status("dead")["state"] == "dead_lettered", 30, "dlq")
            _cancel_after_delivery(client)
            wait_until(lambda: client.status("ghost")["state"] == "cancelled", 10, "cancels")
            _check_states(client.status, inbox, with_offsets=True)
            assert client.status("pending")["answered_by"]["node"] == "a"
            wait_until(lambda: b.wait_ready(0) and role_of(b) == "backup", 30, "b follows")
            a.stop()
            wait_until(lambda: group.masters() == ["b"], 30, "b took over")
            # b delivered nothing before: "delivered" without where, every other state alike.
            _check_states(client.status, inbox, with_offsets=False)
            assert client.status("pending")["answered_by"]["node"] == "b"
            assert inbox.wait_for({"across"}, 30)
            consumed = inbox.first("across")
            wait_until(lambda: client.status("across")["state"] == "delivered", 10, "across")
            across = client.status("across")
            assert (across["partition"], across["offset"]) == (consumed.partition, consumed.offset)
    finally:
        group.stop_all()

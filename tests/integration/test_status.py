"""Where is my message, on Apache Kafka: every state through the node's admin API, the proxy's
HTTP route, the Python client and ``chronos status``; a cancel's answer told truthfully; a
reschedule of every state (through the client, the proxy and ``chronos reschedule``); and the
same answers from the new master after a failover."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
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
    INNER_PARTITIONS,
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


def _schedule_to_move(client: DelayClient, topic: str) -> int:
    """Returns the due time "postponed" had before it was moved."""
    client.send_delay(topic, b"far", delay=3600, id="sooner")
    first_due = client.send_delay(topic, b"near", delay=4, id="postponed").deliver_at_ms
    client.send_delay(topic, b"far", delay=3600, id="from-shell")
    return first_due


def _markers_after(
    inbox: Inbox, client: DelayClient, topic: str, at_ms: int
) -> Callable[[], object]:
    """Markers due after ``at_ms``, delivered: what was due then went out before them."""
    return lambda: inbox.settle(client, topic, INNER_PARTITIONS, deliver_at_ms=at_ms + 500)


def _reschedule_every_state(client: DelayClient, reschedule_http: Any) -> int:
    """Reschedule a pending message sooner (client) and later (``reschedule_http``), and a
    delivered, a cancelled and an unknown one; returns the due time asked of "postponed"."""
    client.reschedule("sooner", delay=1)
    postponed = reschedule_http("postponed", 7_200_000)
    client.reschedule("delivered", delay=3600)  # delivered already: too late
    client.reschedule("cancelled", delay=1)  # cancelled: stays cancelled
    client.reschedule("never-sent", delay=1)  # unknown: nothing is created
    return int(postponed)


def _check_rescheduled(
    answer: Any, inbox: Inbox, postponed_ms: int, passed: Callable[[], object]
) -> None:
    """What the reschedules did, as ``answer(id)`` reports it and the topic shows; ``passed``
    returns once markers due after "postponed"'s first due time were delivered."""
    assert inbox.wait_for({"sooner"}, 60), "moved sooner, but not delivered"
    passed()
    assert inbox.count("postponed") == 0, "postponed, but delivered at its first due time"
    assert inbox.count("delivered") == 1 and inbox.count("sooner") == 1
    moved = answer("postponed")
    assert (moved["state"], moved["due_ms"]) == ("pending", postponed_ms), moved
    assert answer("delivered")["state"] == "delivered"
    assert answer("cancelled")["state"] == "cancelled"
    assert answer("never-sent")["state"] == "unknown"


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
        assert inbox.wait_for({"delivered", "late"}, 60)
        wait_until(lambda: client.status("dead")["state"] == "dead_lettered", 60, "dead-lettered")
        wait_until(lambda: client.status("late")["state"] == "delivered", 60, "seek passed")
        _cancel_after_delivery(client)
        wait_until(lambda: client.status("ghost")["state"] == "cancelled", 60, "cancels applied")

        _check_states(client.status, inbox, with_offsets=True)
        assert client.status("pending")["answered_by"]["role"] == "alone"
        first_due = _schedule_to_move(client, topic)
        with _proxy(settings) as proxy:

            def through_proxy(message_id: str, delay_ms: int) -> int:
                answer = proxy.post(
                    f"/v1/messages/{message_id}/reschedule", json={"delay_ms": delay_ms}
                )
                assert answer.status_code == 202, answer.text
                assert answer.json()["status"] == "reschedule_accepted"
                return int(answer.json()["deliver_at_ms"])

            postponed = _reschedule_every_state(client, through_proxy)
            refused = proxy.post("/v1/messages/pending/reschedule", json={"delay_ms": -1})
            assert refused.status_code == 422 and refused.json()["field"] == "delay"
        _check_rescheduled(
            client.status, inbox, postponed, _markers_after(inbox, client, topic, first_due)
        )
        # From the shell: moved to now, delivered.
        config = tmp_path / "chronos.toml"
        config.write_text(
            f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n'
            f'[topics]\nnamespace = "{namespace}"\ninner_partitions = 4\n'
        )
        argv = ["reschedule", "from-shell", "--delay", "0", "--config", str(config)]
        assert chronos_main(argv) == 0
        printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert printed["status"] == "reschedule_accepted"
        assert inbox.wait_for({"from-shell"}, 60), "chronos reschedule --delay 0 did not deliver"
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
        wait_until(lambda: group.masters() == ["a"], 60, "a is master")
        b = group.start("b")
        ports = [a.admin_port, b.admin_port]
        assert None not in ports
        settings = _with_nodes(a.settings, [p for p in ports if p is not None])
        with ExitStack() as stack:
            inbox = stack.enter_context(Inbox(settings, [topic]))
            client = stack.enter_context(DelayClient(settings))
            _schedule_every_state(client, topic, small)
            client.send_delay(topic, b"across", delay=6, id="across")
            assert inbox.wait_for({"delivered", "late"}, 60)
            wait_until(lambda: client.status("dead")["state"] == "dead_lettered", 60, "dlq")
            b_api = httpx.Client(base_url=f"http://127.0.0.1:{b.admin_port}", timeout=5)
            stack.callback(b_api.close)

            def on_b(message_id: str, field: str = "due_ms") -> Any:
                return b_api.get(f"/v1/messages/{message_id}").json().get(field)

            # Else b may read the cancel of "late" before the progress that delivered it, and
            # remove it as a backup does when unsure (removed_on_backup: a different answer).
            wait_until(lambda: on_b("late", "state") == "delivered", 60, "b saw late delivered")
            _cancel_after_delivery(client)
            wait_until(lambda: client.status("ghost")["state"] == "cancelled", 60, "cancels")
            _check_states(client.status, inbox, with_offsets=True)
            assert client.status("pending")["answered_by"]["node"] == "a"
            # Moved by a, delivered by b: the backup learns the move from a's progress.
            client.send_delay(topic, b"far", delay=3600, id="moved-by-a")
            client.send_delay(topic, b"near", delay=8, id="postponed-by-a")
            moved_due = client.reschedule("moved-by-a", delay=12).deliver_at_ms
            postponed_due = client.reschedule("postponed-by-a", delay=3600).deliver_at_ms
            wait_until(lambda: on_b("moved-by-a") == moved_due, 60, "b applied a's move")
            wait_until(lambda: on_b("postponed-by-a") == postponed_due, 60, "b applied it")
            wait_until(lambda: b.wait_ready(0) and role_of(b) == "backup", 60, "b follows")
            a.stop()
            wait_until(lambda: group.masters() == ["b"], 60, "b took over")
            # b delivered nothing before: "delivered" without where, every other state alike.
            _check_states(client.status, inbox, with_offsets=False)
            assert client.status("pending")["answered_by"]["node"] == "b"
            # Reschedules b decides as master: sooner, too late, cancelled, unknown.
            first_due = _schedule_to_move(client, topic)
            postponed = _reschedule_every_state(
                client, lambda i, ms: client.reschedule(i, delay=ms / 1000).deliver_at_ms
            )
            _check_rescheduled(
                client.status, inbox, postponed, _markers_after(inbox, client, topic, first_due)
            )
            assert inbox.wait_for({"moved-by-a"}, 60), "a's move was lost in the failover"
            assert inbox.count("moved-by-a") == 1
            delivered = inbox.first("moved-by-a")
            assert delivered.due_ms == moved_due and delivered.produced_ms >= moved_due
            assert inbox.count("postponed-by-a") == 0
            assert client.status("postponed-by-a")["due_ms"] == postponed_due
            assert inbox.wait_for({"across"}, 60)
            consumed = inbox.first("across")
            wait_until(lambda: client.status("across")["state"] == "delivered", 60, "across")
            across = client.status("across")
            assert (across["partition"], across["offset"]) == (consumed.partition, consumed.offset)
    finally:
        group.stop_all()

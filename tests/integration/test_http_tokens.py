"""Tokens through the HTTP proxy with a node and Kafka answering for real.

- A token's pending-message quota: up to ``max_pending`` accepted, then 429 with Retry-After;
  a batch that could never fit is a 422; another token keeps its own room. (When room comes
  back: tests/unit/test_quota.py.)
- A token limited to some topics acts by id only on messages of those topics: cancel,
  reschedule and status of another tenant's message are 403, and so is a cancel of an id no
  node knows a topic for (it would stay in force for that id's add).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from chronos.logs import configure_logging
from chronos.settings import LogSettings
from chronos.web import refusals as refusals_module
from chronos.web.tokens import hash_token, new_token
from proxy.http.server import ProxyServer
from tests.integration.harness import Inbox, make_settings, running_node, wait_until

CAPPED, FREE, ORDERS, PAYMENTS, STATUS, METERED = (new_token() for _ in range(6))
_ALL_OPS = '["send", "cancel", "reschedule", "status"]'


def _entry(
    name: str,
    token: str,
    topics: str,
    ops: str = _ALL_OPS,
    max_pending: int = 0,
    messages_per_s: float = 0,
) -> str:
    return (
        f'[[tokens]]\nname = "{name}"\nsha256 = "{hash_token(token)}"\ntopics = {topics}\n'
        f"operations = {ops}\nmax_pending = {max_pending}\nmessages_per_s = {messages_per_s}\n"
    )


@pytest.fixture
def proxy(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Iterator[httpx.Client]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        _entry("capped", CAPPED, '["*"]', max_pending=3)
        + _entry("free", FREE, '["*"]')
        + _entry("orders", ORDERS, f'["{namespace}-orders*"]')
        + _entry("payments", PAYMENTS, f'["{namespace}-payments"]')
        + _entry("proxy", STATUS, "[]", ops='["admin"]')
        + _entry("metered", METERED, '["*"]', messages_per_s=0.01)
    )
    settings = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        admin={"port": 0},
        security={"tokens_file": str(tokens)},
        proxy={"status_token": STATUS},
    )
    with running_node(settings) as node:  # it creates the inner topic, and answers status
        nodes = [f"http://127.0.0.1:{node.admin_port}"]
        server = ProxyServer(
            settings.model_copy(
                update={"proxy": settings.proxy.model_copy(update={"status_nodes": nodes})}
            )
        )
        server.start()
        try:
            assert server.wait_started(10)
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=20) as http:
                yield http
        finally:
            server.stop()
            server.join(10)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _send(http: httpx.Client, token: str, topic: str, count: int) -> httpx.Response:
    messages = [{"topic": topic, "value": "x", "delay_ms": 1000} for _ in range(count)]
    return http.post("/v1/messages/batch", json={"messages": messages}, headers=_auth(token))


def test_pending_quota(proxy: httpx.Client, namespace: str) -> None:
    topic = f"{namespace}-quota"
    assert _send(proxy, CAPPED, topic, 2).status_code == 201
    never = _send(proxy, CAPPED, topic, 4)
    assert never.status_code == 422 and "max_pending" in never.json()["error"], never.text
    assert _send(proxy, CAPPED, topic, 1).status_code == 201
    over = _send(proxy, CAPPED, topic, 1)
    assert over.status_code == 429, over.text
    assert "max_pending" in over.json()["error"]
    assert 1 <= int(over.headers["retry-after"]) <= 61
    single = proxy.post(
        "/v1/messages",
        json={"topic": topic, "value": "x", "delay_ms": 10},
        headers=_auth(CAPPED),
    )
    assert single.status_code == 429, single.text
    assert _send(proxy, FREE, topic, 10).status_code == 201  # its own room: unlimited


def test_a_token_acts_by_id_only_on_its_own_topics(proxy: httpx.Client, namespace: str) -> None:
    message = {"topic": f"{namespace}-payments", "value": "x", "delay_ms": 3_600_000, "id": "pay-1"}
    sent = proxy.post("/v1/messages", json=message, headers=_auth(PAYMENTS))
    assert sent.status_code == 201, sent.text
    wait_until(
        lambda: (
            proxy.get("/v1/messages/pay-1", headers=_auth(PAYMENTS)).json().get("state")
            == "pending"
        ),
        60,
        "the node ingested pay-1",
    )
    later = {"delay_ms": 7_200_000}
    # Another tenant's id is out of reach: unknown to its status (nothing leaks), and a cancel
    # or reschedule of an id its own nodes know no topic for is refused.
    unknown = proxy.get("/v1/messages/pay-1", headers=_auth(ORDERS))
    assert unknown.status_code == 200 and unknown.json() == {
        **unknown.json(),
        "id": "pay-1",
        "state": "unknown",
    }
    for refused in (
        proxy.post("/v1/messages/pay-1/reschedule", json=later, headers=_auth(ORDERS)),
        proxy.delete("/v1/messages/pay-1", headers=_auth(ORDERS)),
        proxy.delete("/v1/messages/not-sent-yet", headers=_auth(ORDERS)),
    ):
        assert refused.status_code == 403, refused.text
        assert refused.json()["field"] == "message_id"
    mine = proxy.get("/v1/messages/pay-1", headers=_auth(PAYMENTS)).json()
    assert mine["state"] == "pending" and mine["id"] == "pay-1"
    moved = proxy.post("/v1/messages/pay-1/reschedule", json=later, headers=_auth(PAYMENTS))
    assert moved.status_code == 202 and moved.json()["id"] == "pay-1", moved.text
    assert proxy.delete("/v1/messages/pay-1", headers=_auth(PAYMENTS)).status_code == 202
    # A token of every topic is not scoped: it names the id as it is on the wire. The cancel's
    # 202 means Kafka holds it; the node applies it when its ingest reads it.
    wait_until(
        lambda: (
            proxy.get("/v1/messages/payments:pay-1", headers=_auth(FREE)).json().get("state")
            == "cancelled"
        ),
        60,
        "the node applied the cancel of payments:pay-1",
    )


def _state(proxy: httpx.Client, message_id: str, token: str) -> str | None:
    """The message's state as the proxy answers it; None while it cannot answer (a 503: the
    node's admin API did not answer in time on a loaded machine, as CI once saw)."""
    answer = proxy.get(f"/v1/messages/{message_id}", headers=_auth(token))
    if answer.status_code != 200:
        return None
    state = answer.json().get("state")
    return state if isinstance(state, str) else None


def test_tenants_have_their_own_ids(
    proxy: httpx.Client, namespace: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two tenants send the same id, each to its own topic: both are delivered, each status
    answers its own message, and one tenant's cancel does not touch the other's. Mutant
    caught: ids global (the second send was a duplicate, never delivered, and its status
    answered 403 naming the first tenant's topic)."""
    orders, payments = f"{namespace}-orders", f"{namespace}-payments"
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "inbox")
    with Inbox(settings, [orders, payments]) as inbox:
        for token, topic in ((ORDERS, orders), (PAYMENTS, payments)):
            body = {"topic": topic, "value": topic, "delay_ms": 1_000, "id": "victim-1"}
            sent = proxy.post("/v1/messages", json=body, headers=_auth(token))
            assert sent.status_code == 201 and sent.json()["id"] == "victim-1", sent.text
        # victim-2 is payments' alone: orders can neither cancel it nor see it.
        body = {"topic": payments, "value": "y", "delay_ms": 3_000, "id": "victim-2"}
        assert proxy.post("/v1/messages", json=body, headers=_auth(PAYMENTS)).status_code == 201
        # victim-3 is both tenants': orders cancels its own, payments' stays.
        for token, topic in ((ORDERS, orders), (PAYMENTS, payments)):
            body = {"topic": topic, "value": "z", "delay_ms": 3_000, "id": "victim-3"}
            assert proxy.post("/v1/messages", json=body, headers=_auth(token)).status_code == 201
        wait_until(
            lambda: all(
                _state(proxy, i, t) == "pending"
                for i, t in (("victim-2", PAYMENTS), ("victim-3", ORDERS), ("victim-3", PAYMENTS))
            ),
            60,
            "the node ingested victim-2 and both victim-3",
        )
        assert proxy.delete("/v1/messages/victim-2", headers=_auth(ORDERS)).status_code == 403
        assert proxy.get("/v1/messages/victim-2", headers=_auth(ORDERS)).json()["state"] == (
            "unknown"
        )
        cancelled = proxy.delete("/v1/messages/victim-3", headers=_auth(ORDERS))
        assert cancelled.status_code == 202, cancelled.text
        expected = {
            "orders:victim-1",
            "payments:victim-1",
            "payments:victim-2",
            "payments:victim-3",
        }
        assert inbox.wait_for(expected), f"{expected - set(inbox.by_id)} not delivered"
        for message_id in expected:
            assert inbox.first(message_id).topic == (orders if "orders" in message_id else payments)
        for token, topic in ((ORDERS, orders), (PAYMENTS, payments)):
            status = proxy.get("/v1/messages/victim-1", headers=_auth(token))
            assert status.status_code == 200, status.text
            assert status.json()["id"] == "victim-1" and status.json()["topic"] == topic
    assert inbox.count("orders:victim-3") == 0, "orders' cancel of its victim-3 did not hold"


def test_messages_per_s_counts_messages_and_refusals_are_told(
    proxy: httpx.Client, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token at 0.01 messages/s (a bucket of one message, refilled in 100 s): a batch of two
    is over it for good (422), one message goes, the next is 429 with Retry-After; an unknown
    token is 401. Each refusal is logged (``request_refused`` with the token's name, never the
    secret) and counted on the proxy's ``/metrics``, which itself needs the admin operation.
    Mutants caught: a batch counted as one request; refusals neither logged nor counted."""
    topic = f"{namespace}-metered"
    # An in-process CLI run of an earlier test left errors-only logs: info level again, and a
    # fresh logger (one first used earlier keeps that set-up: cache_logger_on_first_use).
    configure_logging(LogSettings())
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(refusals_module, "log", structlog.get_logger(refusals_module.__name__))
        assert _send(proxy, METERED, topic, 2).status_code == 422
        assert _send(proxy, METERED, topic, 1).status_code == 201
        again = _send(proxy, METERED, topic, 1)
        assert again.status_code == 429 and int(again.headers["retry-after"]) >= 1
        assert _send(proxy, new_token(), topic, 1).status_code == 401
    refused = [e for e in logs if e["event"] == "request_refused"]
    assert [(e["status"], e["reason"], e["token"]) for e in refused] == [
        (429, "messages_per_s", "metered"),
        (401, "unknown_token", None),
    ]
    assert all(METERED not in str(e) for e in logs)
    assert proxy.get("/metrics", headers=_auth(FREE)).status_code == 403
    text = proxy.get("/metrics", headers=_auth(STATUS)).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert (
        samples[("chronos_proxy_refused_total", (("reason", "messages_per_s"), ("status", "429")))]
        == 1
    )
    assert (
        samples[("chronos_proxy_refused_total", (("reason", "unknown_token"), ("status", "401")))]
        == 1
    )
    assert (
        samples[("chronos_proxy_refused_total", (("reason", "operation"), ("status", "403")))] == 1
    )
    assert samples[("chronos_proxy_messages_scheduled_total", ())] >= 1
    assert samples[("chronos_proxy_responses_total", (("status", "201"),))] >= 1
    assert samples[("chronos_proxy_tokens_file_ok", ())] == 1

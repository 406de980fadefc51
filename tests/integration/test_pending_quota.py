"""A token's pending-message quota through the HTTP proxy, with Kafka acknowledging for real:
up to ``max_pending`` accepted, then 429 with Retry-After; a batch that could never fit is a
422; another token keeps its own room. (When room comes back: tests/unit/test_quota.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chronos.web.tokens import hash_token, new_token
from proxy.http.server import ProxyServer
from tests.integration.harness import make_settings, running_node

CAPPED, FREE = new_token(), new_token()


def _entry(name: str, token: str, max_pending: int) -> str:
    return (
        f'[[tokens]]\nname = "{name}"\nsha256 = "{hash_token(token)}"\ntopics = ["*"]\n'
        f'operations = ["send"]\nmax_pending = {max_pending}\n'
    )


@pytest.fixture
def proxy(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> Iterator[httpx.Client]:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(_entry("capped", CAPPED, 3) + _entry("free", FREE, 0))
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", security={"tokens_file": str(tokens)}
    )
    with running_node(settings):  # it creates the inner topic
        server = ProxyServer(settings)
        server.start()
        try:
            assert server.wait_started(10)
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=20) as http:
                yield http
        finally:
            server.stop()
            server.join(10)


def _send(http: httpx.Client, token: str, topic: str, count: int) -> httpx.Response:
    messages = [{"topic": topic, "value": "x", "delay_ms": 1000} for _ in range(count)]
    return http.post(
        "/v1/messages/batch",
        json={"messages": messages},
        headers={"Authorization": f"Bearer {token}"},
    )


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
        headers={"Authorization": f"Bearer {CAPPED}"},
    )
    assert single.status_code == 429, single.text
    assert _send(proxy, FREE, topic, 10).status_code == 201  # its own room: unlimited

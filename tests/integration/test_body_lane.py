"""Large schedule bodies read by body workers (proxy/http/lane.py, issue 62).

- A worker answers every body exactly as the event loop does: the same status and the same
  JSON for bodies that do not parse, break the model, break a message's rules, name a topic
  the token may not send to, or are valid (receipts compared byte for byte, in a tenant's id
  space).
- While a worker reads a large body, other requests are answered (the event loop is free),
  and past the workers and their queue a large body gets 503 with Retry-After.
- A worker that dies is replaced: the body it was reading gets 503, the next one its answer.
- ``proxy.request_cpu_ms`` bounds the CPU of a request's messages on both paths (413).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from chronos.kafka.admin import ensure_topics
from chronos.settings import ChronosSettings
from chronos.web.tokens import hash_token, new_token
from proxy.http import lane as lane_module
from proxy.http.server import ProxyServer
from tests.integration.harness import make_settings, wait_until

ORDERS, EVERY = new_token(), new_token()
DUE_MS = 4_102_444_800_000  # 2100-01-01: far ahead, and the same in every answer


def _tokens(path: Path, namespace: str) -> Path:
    path.write_text(
        f'[[tokens]]\nname = "orders"\nsha256 = "{hash_token(ORDERS)}"\n'
        f'topics = ["{namespace}-orders"]\noperations = ["send"]\n'
        f'[[tokens]]\nname = "every"\nsha256 = "{hash_token(EVERY)}"\ntopics = ["*"]\n'
        'operations = ["send"]\n'
    )
    return path


@pytest.fixture
def settings(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> ChronosSettings:
    made = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        limits={"max_delay_s": 200 * 365 * 86400},
        security={"tokens_file": str(_tokens(tmp_path / "tokens.toml", namespace))},
    )
    ensure_topics(made)
    return made


def _serve(settings: ChronosSettings, **proxy: Any) -> ProxyServer:
    server = ProxyServer(
        settings.model_copy(update={"proxy": settings.proxy.model_copy(update=proxy)})
    )
    server.start()
    assert server.wait_started(30)
    return server


def _message(namespace: str, **fields: Any) -> dict[str, Any]:
    return {"topic": f"{namespace}-orders", "value": "v", "deliver_at_ms": DUE_MS, **fields}


def _bodies(namespace: str) -> list[tuple[str, bytes]]:
    """(path, body) pairs covering every kind of answer."""
    one = _message(namespace, id="a1")
    cron = {"kind": "cron", "cron": "0 9 * * *", "zone": "Europe", "times": 5}
    as_json: list[tuple[str, Any]] = [
        ("/v1/messages", one),
        ("/v1/messages/batch", {"messages": [one, _message(namespace, id="a2", key="k")]}),
        ("/v1/messages", {**one, "unknown": 1, "other": 2}),
        ("/v1/messages", [one]),
        ("/v1/messages/batch", {"messages": []}),
        ("/v1/messages/batch", {"messages": [one] * 3}),  # over proxy.batch_max below
        ("/v1/messages", {**one, "delay_ms": 5}),
        ("/v1/messages", {**one, "topic": "bad topic"}),
        ("/v1/messages", {**one, "topic": "elsewhere"}),  # the token's topics: 403
        ("/v1/messages/batch", {"messages": [one, {**one, "topic": "elsewhere", "x": 1}]}),
        ("/v1/messages/batch", {"messages": [one, {**one, "repeat": cron}]}),
        ("/v1/messages/batch", {"messages": [one, {**one, "topic": "elsewhere", "value": 1}]}),
        ("/v1/messages", {**one, "encoding": "base64", "value": "not base64!"}),
        ("/v1/messages", {**one, "headers": [{"name": "chronos-x", "value": "v"}]}),
        ("/v1/messages", {**one, "id": "x" * 200}),
        ("/v1/messages", {**one, "deliver_at": "2100-01-01T00:00:00"}),
        ("/v1/messages", {**one, "value": "\ud800"}),
        ("/v1/messages/batch", {"messages": [one, {**one, "value": "x" * 1_000_001}]}),
    ]
    raw = [
        ("/v1/messages", b'{"topic": "t", "value": "x"'),
        ("/v1/messages", b'{"topic": "\xff"}'),
        ("/v1/messages", b"[" * 100_000 + b"]" * 100_000),
        ("/v1/messages", b'{"delay_ms": ' + b"9" * 5_000 + b"}"),
        ("/v1/messages", b"\xff\xfe"),
    ]
    return [(path, json.dumps(body).encode()) for path, body in as_json] + raw


def _answer(server: ProxyServer, path: str, body: bytes, token: str) -> tuple[int, Any]:
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    answer = httpx.post(f"http://127.0.0.1:{server.port}{path}", content=body, headers=headers)
    return answer.status_code, answer.json()


def test_a_worker_answers_every_body_as_the_event_loop_does(
    settings: ChronosSettings, namespace: str
) -> None:
    limited = settings.model_copy(
        update={"proxy": settings.proxy.model_copy(update={"batch_max": 2})}
    )
    inline = _serve(limited, body_workers=0)
    workers = _serve(limited, inline_body_bytes=0)
    try:
        statuses = set()
        for token in (ORDERS, EVERY):
            for path, body in _bodies(namespace):
                expected = _answer(inline, path, body, token)
                assert _answer(workers, path, body, token) == expected, (path, body[:200])
                statuses.add(expected[0])
        assert workers.lane.in_flight == 0
    finally:
        for server in (inline, workers):
            server.stop()
            server.join(10)
    assert statuses == {201, 403, 413, 422}, "every kind of answer was compared"


def test_other_requests_are_answered_while_a_worker_reads_and_its_queue_is_bounded(
    settings: ChronosSettings, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reading, release = threading.Event(), threading.Event()
    real_converse = lane_module._Worker.converse

    def held(worker: Any, *args: Any) -> Any:
        reading.set()
        release.wait(60)
        return real_converse(worker, *args)

    monkeypatch.setattr(lane_module._Worker, "converse", held)
    server = _serve(settings, inline_body_bytes=50, body_workers=1, body_queue=0)
    base = f"http://127.0.0.1:{server.port}"
    body = json.dumps(_message(namespace)).encode()
    headers = {"content-type": "application/json", "authorization": f"Bearer {EVERY}"}
    first: list[httpx.Response] = []
    sender = threading.Thread(
        target=lambda: first.append(
            httpx.post(f"{base}/v1/messages", content=body, headers=headers, timeout=60)
        )
    )
    try:
        sender.start()
        assert reading.wait(60), "the worker got the first body"
        assert httpx.get(f"{base}/healthz").status_code == 200
        small = httpx.post(f"{base}/v1/messages/batch", json={"messages": []}, headers=headers)
        assert small.status_code == 422, "a body is still read on the event loop meanwhile"
        full = httpx.post(f"{base}/v1/messages", content=body, headers=headers)
        assert full.status_code == 503 and full.headers["retry-after"] == "1", full.text
        assert not first, "the first body is still being read"
    finally:
        release.set()
        sender.join(60)
        server.stop()
        server.join(10)
    assert first[0].status_code == 201, first[0].text


def test_a_worker_that_dies_is_replaced(
    settings: ChronosSettings, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while idle: the next body gets a new worker. Killed while reading a body: that
    body gets 503 (its outcome unknown), the next one a new worker."""
    reading, release = threading.Event(), threading.Event()
    real_converse = lane_module._Worker.converse

    def held(worker: Any, *args: Any) -> Any:
        if not release.is_set():
            reading.set()
            release.wait(60)
        return real_converse(worker, *args)

    server = _serve(settings, inline_body_bytes=0, body_workers=1)
    base = f"http://127.0.0.1:{server.port}"
    headers = {"authorization": f"Bearer {EVERY}"}
    message = _message(namespace)

    def send() -> httpx.Response:
        return httpx.post(f"{base}/v1/messages", json=message, headers=headers, timeout=60)

    try:
        assert send().status_code == 201
        (idle,) = server.lane._idle
        idle._process.kill()
        idle._process.wait()
        assert send().status_code == 201, "a new worker read it"
        (reader,) = server.lane._idle
        monkeypatch.setattr(lane_module._Worker, "converse", held)
        answers: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: answers.append(send()))
        sender.start()
        assert reading.wait(60), "the worker got the body"
        reader._process.kill()
        reader._process.wait()
        release.set()
        sender.join(60)
        assert answers[0].status_code == 503, answers[0].text
        assert "outcome is unknown" in answers[0].json()["error"]
        assert send().status_code == 201, "a new worker read the next one"
    finally:
        release.set()
        server.stop()
        server.join(10)


@pytest.mark.parametrize("where", ["event loop", "worker"])
def test_a_request_whose_messages_cost_more_cpu_than_its_budget_is_refused(
    settings: ChronosSettings, namespace: str, where: str
) -> None:
    lane = {"body_workers": 0} if where == "event loop" else {"inline_body_bytes": 0}
    server = _serve(settings, request_cpu_ms=1, **lane)
    try:
        batch = {"messages": [_message(namespace) for _ in range(2_000)]}
        answer = httpx.post(
            f"http://127.0.0.1:{server.port}/v1/messages/batch",
            json=batch,
            headers={"authorization": f"Bearer {EVERY}"},
            timeout=60,
        )
        assert answer.status_code == 413, answer.text
        assert "proxy.request_cpu_ms (1 ms)" in answer.json()["error"]
        wait_until(lambda: server.lane.in_flight == 0, 10, "the worker is free")
    finally:
        server.stop()
        server.join(10)


def test_a_small_body_whose_messages_cost_more_than_inline_cpu_ms_is_read_by_a_worker(
    settings: ChronosSettings, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch under inline_body_bytes of cron repeats (each costs more than its bytes):
    past proxy.inline_cpu_ms on the server's side, a worker reads it again and answers."""
    read_by_workers: list[bool] = []
    real_converse = lane_module._Worker.converse

    def counted(worker: Any, *args: Any) -> Any:
        read_by_workers.append(True)
        return real_converse(worker, *args)

    monkeypatch.setattr(lane_module._Worker, "converse", counted)
    server = _serve(settings, inline_cpu_ms=1)
    try:
        repeat = {"kind": "cron", "cron": "0 9 * * 1-5", "zone": "Europe/Berlin", "times": 1000}
        batch = {
            "messages": [
                _message(
                    namespace, id=f"c{i}", deliver_at_ms=DUE_MS + i * 86_400_000, repeat=repeat
                )
                for i in range(200)
            ]
        }
        body = json.dumps(batch).encode()
        assert len(body) < server.lane.inline_bytes, "a body read on the server's side first"
        answer = httpx.post(
            f"http://127.0.0.1:{server.port}/v1/messages/batch",
            content=body,
            headers={"content-type": "application/json", "authorization": f"Bearer {EVERY}"},
            timeout=60,
        )
        assert answer.status_code == 201, answer.text
        assert [r["id"] for r in answer.json()["receipts"]] == [f"c{i}" for i in range(200)]
        assert read_by_workers == [True], "handed to a worker once"
    finally:
        server.stop()
        server.join(10)

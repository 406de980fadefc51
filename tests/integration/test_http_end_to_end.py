"""End to end through the HTTP proxy: schedule, deliver, cancel, idempotency, errors."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import httpx
import pytest

from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from proxy.http.server import ProxyServer
from tests.integration.harness import Inbox, make_settings, running_node, wait_until


@pytest.fixture(scope="module")
def stack(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ChronosSettings, httpx.Client]]:
    """One node and one proxy for the module (starting them took 2.2 s a test, 86 s of the
    suite): each test names its own topics and ids from its ``namespace``, so no test sees
    another's messages."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    settings = make_settings(kafka_bootstrap, namespace, tmp_path_factory.mktemp("http") / "store")
    with running_node(settings):
        server = ProxyServer(settings)
        server.start()
        try:
            wait_until(lambda: server.started, 60, "the proxy listens")
            with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=20) as http:
                yield settings, http
        finally:
            server.stop()
            server.join(10)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.embedded
def test_binary_message_is_delivered_intact_and_not_early(
    stack: tuple[ChronosSettings, httpx.Client], namespace: str
) -> None:
    settings, http = stack
    topic = f"{namespace}-orders"
    value, key, header = bytes(range(256)) * 4, b"\x00key\xff", b"\x00\x01\xfe"
    with Inbox(settings, [topic]) as inbox:
        answer = http.post(
            "/v1/messages",
            json={
                "topic": topic,
                "encoding": "base64",
                "value": b64(value),
                "key": b64(key),
                "headers": [
                    {"name": "trace", "value": b64(header)},
                    {"name": "empty", "value": None},
                ],
                "delay_ms": 700,
            },
        )
        assert answer.status_code == 201, answer.text
        receipt = answer.json()
        assert inbox.wait_for({receipt["id"]})
        got = inbox.first(receipt["id"])
    assert (got.key, got.value) == (key, value)
    assert [h for h in got.headers if not h[0].startswith("chronos-")] == [
        ("trace", header),
        ("empty", None),
    ]
    assert got.due_ms == receipt["deliver_at_ms"]
    assert got.produced_ms >= receipt["deliver_at_ms"], "delivered before its due time"
    assert got.occurrence == 1


def test_a_cron_repeat_is_answered_with_its_first_fire_in_its_zone(
    stack: tuple[ChronosSettings, httpx.Client], namespace: str
) -> None:
    _settings, http = stack
    repeat = {"kind": "cron", "cron": "0 9 * * 1-5", "zone": "Europe/Berlin", "times": 2}
    answer = http.post(
        "/v1/messages",
        json={"topic": f"{namespace}-daily", "value": "x", "delay_ms": 0, "repeat": repeat},
    )
    assert answer.status_code == 201, answer.text
    receipt = answer.json()
    local = datetime.fromtimestamp(receipt["deliver_at_ms"] / 1000, ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute, local.second, local.isoweekday() <= 5) == (9, 0, 0, True)
    assert http.delete(f"/v1/messages/{receipt['id']}").status_code == 202


@pytest.mark.embedded
def test_batch_cancel_and_idempotent_resend(
    stack: tuple[ChronosSettings, httpx.Client], namespace: str
) -> None:
    settings, http = stack
    topic = f"{namespace}-jobs"
    with Inbox(settings, [topic]) as inbox:
        batch = http.post(
            "/v1/messages/batch",
            json={
                "messages": [
                    {"topic": topic, "value": f"m{i}", "delay_ms": 1500, "id": f"{namespace}-{i}"}
                    for i in range(20)
                ]
            },
        )
        assert batch.status_code == 201, batch.text
        ids = [r["id"] for r in batch.json()["receipts"]]
        assert ids == [f"{namespace}-{i}" for i in range(20)]
        # Re-sending the same ids (another delay) must not schedule second deliveries.
        again = http.post(
            "/v1/messages/batch",
            json={
                "messages": [
                    {"topic": topic, "value": f"m{i}", "delay_ms": 300, "id": f"{namespace}-{i}"}
                    for i in range(20)
                ]
            },
        )
        assert again.status_code == 201
        cancelled = ids[:5]
        for message_id in cancelled:
            answer = http.delete(f"/v1/messages/{message_id}")
            assert answer.status_code == 202
            assert answer.json() == {"id": message_id, "status": "cancel_accepted"}
        assert inbox.wait_for(set(ids[5:]), 60)
        with DelayClient(settings) as client:  # markers after them: a wrong delivery came first
            inbox.settle(client, topic, settings.topics.inner_partitions)
        assert all(inbox.count(i) == 1 for i in ids[5:])
        assert all(inbox.count(i) == 0 for i in cancelled)


def test_deliver_at_is_taken_on_every_endpoint(
    stack: tuple[ChronosSettings, httpx.Client], namespace: str
) -> None:
    """An ISO-8601 ``deliver_at`` (Z, an offset, a past time) on the single, batch and
    reschedule endpoints: accepted, due at that millisecond, delivered not before it."""
    settings, http = stack
    topic = f"{namespace}-at"
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    due_ms = int(due.timestamp() * 1000)
    zulu = due.isoformat().replace("+00:00", "Z")
    plus_two = due.astimezone(timezone(timedelta(hours=2))).isoformat()
    with Inbox(settings, [topic]) as inbox:
        one = http.post("/v1/messages", json={"topic": topic, "value": "z", "deliver_at": zulu})
        assert one.status_code == 201, one.text
        assert one.json()["deliver_at_ms"] == due_ms
        batch = http.post(
            "/v1/messages/batch",
            json={
                "messages": [
                    {"topic": topic, "value": "offset", "deliver_at": plus_two},
                    {"topic": topic, "value": "past", "deliver_at": "2020-01-01T00:00:00+00:00"},
                ]
            },
        )
        assert batch.status_code == 201, batch.text
        offset, past = batch.json()["receipts"]
        assert offset["deliver_at_ms"] == due_ms
        assert past["deliver_at_ms"] <= int(time.time() * 1000), "a past time means now"
        later = http.post(
            "/v1/messages", json={"topic": topic, "value": "moved", "delay_ms": 3_600_000}
        )
        assert later.status_code == 201, later.text
        moved = later.json()["id"]
        answer = http.post(f"/v1/messages/{moved}/reschedule", json={"deliver_at": zulu})
        assert answer.status_code == 202, answer.text
        assert answer.json()["deliver_at_ms"] == due_ms
        ids = {one.json()["id"], offset["id"], past["id"], moved}
        assert inbox.wait_for(ids), f"{len(ids - set(inbox.by_id))} not delivered"
        for message_id in ids - {past["id"]}:
            got = inbox.first(message_id)
            assert got.due_ms == due_ms
            assert got.produced_ms >= due_ms, "delivered before its due time"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"deliver_at": "2030-01-01T00:00:00"}, "must include a timezone offset"),
        ({"deliver_at": 1893456000}, "must be an ISO-8601 date-time string"),
        ({"deliver_at": "tomorrow"}, "is not an ISO-8601 date-time"),
    ],
)
def test_a_bad_deliver_at_is_refused_saying_why(
    stack: tuple[ChronosSettings, httpx.Client], body: dict[str, object], error: str
) -> None:
    _settings, http = stack
    for path, json in (
        ("/v1/messages", {"topic": "ok", "value": "x", **body}),
        ("/v1/messages/batch", {"messages": [{"topic": "ok", "value": "x", **body}]}),
        ("/v1/messages/some-id/reschedule", body),
    ):
        answer = http.post(path, json=json)
        assert answer.status_code == 422, (path, answer.text)
        assert error in answer.json()["error"], (path, answer.text)
        assert answer.json()["field"].endswith("deliver_at"), (path, answer.text)


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"topic": "bad topic", "value": "x", "delay_ms": 1}, 422, "topic"),
        ({"topic": "{ns}.inner", "value": "x", "delay_ms": 1}, 422, "topic"),
        ({"topic": "__consumer_offsets", "value": "x", "delay_ms": 1}, 422, "topic"),
        ({"topic": "ok", "value": "x"}, 422, "delay_ms"),
        ({"topic": "ok", "value": "x", "delay_ms": 1, "deliver_at_ms": 5}, 422, "delay_ms"),
        ({"topic": "ok", "value": "x", "delay_ms": -5}, 422, "delay"),
        ({"topic": "ok", "value": "x", "delay_ms": 400 * 86_400_000}, 422, "deliver_at"),
        ({"topic": "ok", "value": "x", "deliver_at": "2030-01-01T00:00:00"}, 422, "deliver_at"),
        (
            {
                "topic": "ok",
                "value": "x",
                "delay_ms": 1,
                "headers": [{"name": "chronos-id", "value": "x"}],
            },
            422,
            "headers[0]",
        ),
        ({"topic": "ok", "value": "x" * 1_000_001, "delay_ms": 1}, 413, "value"),
        ({"topic": "ok", "value": "!!", "encoding": "base64", "delay_ms": 1}, 422, "value"),
        ({"topic": "ok", "value": "x", "delay_ms": 1, "id": "a b"}, 422, "id"),
        (
            {
                "topic": "ok",
                "value": "x",
                "delay_ms": 1,
                "repeat": {"kind": "fixed", "interval_ms": 10, "times": 3},
            },
            422,
            "repeat.interval_ms",
        ),
        (
            {"topic": "ok", "value": "x", "delay_ms": 1, "repeat": {"kind": "cron", "times": 3}},
            422,
            "repeat.cron",
        ),
        (
            {
                "topic": "ok",
                "value": "x",
                "delay_ms": 1,
                "repeat": {"kind": "cron", "cron": "0 9 * * *", "zone": "Mars/Base", "times": 3},
            },
            422,
            "repeat.cron",
        ),
        *(
            (  # issue 62: a folder of the zone database, or a name too long: was a 500
                {
                    "topic": "ok",
                    "value": "x",
                    "delay_ms": 3_600_000,
                    "repeat": {"kind": "cron", "cron": "0 9 * * *", "zone": zone, "times": 5},
                },
                422,
                "repeat.cron",
            )
            for zone in ("Europe", "Etc", "America/Argentina", "A" * 300)
        ),
        (
            {"topic": "ok", "value": "x", "delay_ms": 1, "repeat": {"kind": "fixed", "times": 3}},
            422,
            "repeat.interval_ms",
        ),
        ({"topic": "ok", "value": "x", "delay_ms": 1, "unknown": 1}, 422, "unknown"),
        ({"value": "x", "delay_ms": 1}, 422, "topic"),
    ],
)
def test_bad_requests_name_the_field(
    stack: tuple[ChronosSettings, httpx.Client],
    body: dict[str, object],
    status: int,
    field: str,
) -> None:
    settings, http = stack
    if isinstance(body.get("topic"), str):
        # "{ns}": the stack's own namespace (its internal topics are refused as targets).
        own = settings.topics.namespace
        body = {**body, "topic": str(body["topic"]).replace("{ns}", own)}
    answer = http.post("/v1/messages", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["field"] == field


def test_batch_error_names_the_item(stack: tuple[ChronosSettings, httpx.Client]) -> None:
    _settings, http = stack
    answer = http.post(
        "/v1/messages/batch",
        json={
            "messages": [
                {"topic": "ok", "value": "x", "delay_ms": 1},
                {"topic": "bad topic", "value": "x", "delay_ms": 1},
            ]
        },
    )
    assert answer.status_code == 422
    assert answer.json()["field"] == "messages[1].topic"


def test_health_and_openapi(stack: tuple[ChronosSettings, httpx.Client]) -> None:
    _settings, http = stack
    health = http.get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok", "kafka": True}
    spec = http.get("/openapi.json").json()
    assert {"/v1/messages", "/v1/messages/batch", "/v1/messages/{message_id}", "/healthz"} <= set(
        spec["paths"]
    )


def test_largest_allowed_message_is_delivered(
    stack: tuple[ChronosSettings, httpx.Client], namespace: str
) -> None:
    """At the default limit, with the longest id, into a topic with the broker's default size
    limit: what chronos adds on delivery must fit beside the user's bytes."""
    settings, http = stack
    topic = f"{namespace}-big"
    limits = settings.limits
    value = "v" * (limits.max_message_bytes - 10)
    body = {"topic": topic, "value": value, "key": "k" * 10, "delay_ms": 10}
    with Inbox(settings, [topic]) as inbox:
        answer = http.post("/v1/messages", json={**body, "id": "i" * limits.max_id_bytes})
        assert answer.status_code == 201, answer.text
        message_id = answer.json()["id"]
        assert inbox.wait_for({message_id})
        assert inbox.first(message_id).value == value.encode()


@pytest.mark.parametrize(
    ("method", "path", "content", "content_type", "status", "error", "field"),
    [
        (
            "POST",
            "/v1/messages",
            b'{"topic": "ok",, }',
            "application/json",
            422,
            "the body is not valid JSON at character 15",
            None,
        ),
        (
            "POST",
            "/v1/messages",
            b"topic=ok",
            "application/x-www-form-urlencoded",
            415,
            "'application/x-www-form-urlencoded'",
            None,
        ),
        ("POST", "/v1/messages", b"", None, 415, "content-type application/json", None),
        (
            "POST",
            "/v1/messages/batch",
            b'{"messages": [{"value": "x", "delay_ms": 1}]}',
            "application/json",
            422,
            "Field required",
            "messages[0].topic",
        ),
        ("GET", "/v1/nowhere", b"", None, 404, "Not Found", None),
        ("PUT", "/v1/messages", b"{}", "application/json", 405, "Method Not Allowed", None),
    ],
)
def test_every_error_has_the_documented_shape(
    stack: tuple[ChronosSettings, httpx.Client],
    method: str,
    path: str,
    content: bytes,
    content_type: str | None,
    status: int,
    error: str,
    field: str | None,
) -> None:
    _settings, http = stack
    headers = {} if content_type is None else {"content-type": content_type}
    answer = http.request(method, path, content=content, headers=headers)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error", "field"}, body
    assert error in body["error"] and body["field"] == field, body


def test_a_trailing_slash_is_not_redirected_to_the_callers_host(
    stack: tuple[ChronosSettings, httpx.Client],
) -> None:
    """Mutant caught: Starlette's redirect of ``/healthz/``, whose Location took the Host
    header (an open redirect to any host)."""
    _settings, http = stack
    answer = http.get("/healthz/", headers={"host": "evil.example"})
    assert answer.status_code == 404 and "location" not in answer.headers
    assert answer.json() == {"error": "Not Found", "field": None}

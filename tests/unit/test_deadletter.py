"""Dead letters always fit and are sent once, whatever the rejected record holds."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import structlog
from confluent_kafka import KafkaError

from chronos.delivery import deadletter
from chronos.delivery.deadletter import (
    KEPT_HEADERS_BYTES,
    DeadLetters,
    Rejected,
    dead_letter_headers,
    shrink,
)
from chronos.kafka.publishers.stub import StubPublisher, StubRecord
from chronos.logs import configure_logging
from chronos.metrics import CountingMetrics
from chronos.settings import LogSettings
from chronos.types import Headers
from chronos.wire import H_DLQ_REASON, H_DLQ_SOURCE, H_DLQ_TRUNCATED

LIMIT = 100_000  # the dead-letter topic's max.message.bytes in these tests


def size_limited(transient: set[str]) -> StubPublisher:
    """Acknowledges at once what fits, refuses the rest as Kafka does; records every send."""

    def outcome(record: StubRecord) -> KafkaError | None:
        size = len(record.key or b"") + len(record.value or b"")
        size += sum(len(n) + len(v or b"") for n, v in record.headers)
        if (record.header(H_DLQ_SOURCE) or b"").decode() in transient:
            return KafkaError(KafkaError._MSG_TIMED_OUT)
        if size > LIMIT:
            return KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        return None

    return StubPublisher(outcome=outcome, auto=True)


def rejected(
    source: str,
    key: bytes = b"k",
    value: bytes = b"v",
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> Rejected:
    return key, value, list(headers), "bad record", source


def test_bulk_in_headers_and_key_still_fits() -> None:
    topic = size_limited(set())
    dead = DeadLetters(topic, "ns.deadletter", CountingMetrics())
    poison = rejected(
        "inner[0]@7",
        key=b"k" * 60_000,
        value=b"v" * 10,
        headers=[("big", b"h" * 60_000), ("small", b"s"), ("chronos-id", b"x" * 70_000)],
    )
    assert dead.send_and_wait([poison], 5.0)
    last = topic.published[-1]
    key, value, headers = last.key, last.value, last.headers
    assert key is None and value is None  # too large to keep
    names = dict(headers)
    assert names["small"] == b"s" and "big" not in names and "chronos-id" not in names
    assert names[H_DLQ_TRUNCATED] == b"value=10 key=60000 headers=130019"
    assert names[H_DLQ_REASON] == b"bad record" and names[H_DLQ_SOURCE] == b"inner[0]@7"


def test_shrunk_headers_stay_within_their_budget() -> None:
    many: Headers = [(f"h{i}", b"x" * 1000) for i in range(100)]
    _key, kept, _sizes = shrink(None, None, many)
    assert 0 < sum(len(n) + len(v or b"") for n, v in kept) <= KEPT_HEADERS_BYTES


def test_acknowledged_dead_letters_are_not_sent_again_when_the_batch_is_retried() -> None:
    transient = {"inner[0]@2"}
    topic = size_limited(transient)
    dead = DeadLetters(topic, "ns.deadletter", CountingMetrics())
    batch = [rejected(f"inner[0]@{offset}") for offset in range(3)]
    acknowledged: set[str] = set()
    assert not dead.send_and_wait(batch, 5.0, acknowledged)  # one failed: the batch is retried
    transient.clear()
    assert dead.send_and_wait(batch, 5.0, acknowledged)
    sources = [r.header(H_DLQ_SOURCE) or b"" for r in topic.published]
    assert sorted(sources) == [b"inner[0]@0", b"inner[0]@1", b"inner[0]@2", b"inner[0]@2"]


def test_a_forged_chronos_header_never_shadows_the_real_reason() -> None:
    headers = dead_letter_headers(
        [("chronos-dlq-reason", b"all fine"), ("trace", b"1")],
        "unknown header chronos-dlq-reason",
        "ns.inner[0]@7",
        None,
        None,
    )
    reasons = [raw for name, raw in headers if name == "chronos-dlq-reason"]
    assert reasons == [b"unknown header chronos-dlq-reason"]
    assert ("user-chronos-dlq-reason", b"all fine") in headers
    assert ("trace", b"1") in headers


def test_an_oversized_dead_letter_goes_out_shrunk_without_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A dead letter too large for its topic is refused, then sent shrunk: one info line and a
    count, no ``dead_letter_failed`` error (it had not failed). Mutant caught: the refusal
    logged as an error for every oversized dead letter that then went out."""
    topic = size_limited(set())
    metrics = CountingMetrics()
    dead = DeadLetters(topic, "ns.deadletter", metrics)
    # An in-process CLI run of an earlier test left errors-only logs: info level again, and a
    # fresh logger (one first used earlier keeps that set-up: cache_logger_on_first_use).
    configure_logging(LogSettings())
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(deadletter, "log", structlog.get_logger(deadletter.__name__))
        assert dead.send_and_wait([rejected("inner[0]@7", value=b"v" * (LIMIT + 1))], 5.0)
    assert [e["event"] for e in logs] == ["dead_letter_too_large"]
    assert metrics.totals()["dead_letters_shrunk"] == 1 and metrics.totals()["dead_lettered"] == 1
    assert topic.published[-1].header(H_DLQ_TRUNCATED) is not None

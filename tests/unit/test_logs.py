"""Logs a machine can read: every line JSON in JSON mode (stdlib and librdkafka included), and
librdkafka's repeated lines held back with a count."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator

import pytest
import structlog
from confluent_kafka import KafkaError

from chronos.kafka import librdkafka as clients_module
from chronos.kafka.clients import KafkaClients
from chronos.kafka.librdkafka import producer
from chronos.logs import LIBRDKAFKA, RepeatLimiter, Throttle, configure_logging
from chronos.settings import KafkaSettings, LogSettings
from tests.clocks import ManualClock


def _librdkafka_record(client: str, text: str) -> logging.LogRecord:
    """A record as confluent-kafka makes it: ``"%s [%s] %s" % (facility, client, text)``."""
    return logging.LogRecord(
        LIBRDKAFKA, logging.ERROR, "", 0, "%s [%s] %s", ("FAIL", client, text), None
    )


def test_a_repeated_line_is_written_once_per_window_then_with_its_count() -> None:
    """Mutants caught: no limiting; lines of two clients (or two ports) counted apart; the
    count of held-back lines dropped."""
    clock = ManualClock()
    limiter = RepeatLimiter(Throttle(10.0, clock))
    refused = "127.0.0.1:{port}/bootstrap: Connect failed: Connection refused (after {ms}ms)"
    first = _librdkafka_record("a#producer-1", refused.format(port=9092, ms=0))
    assert limiter.filter(first) and not hasattr(first, "repeated")
    for n in range(20):
        clock.now += 0.4
        again = _librdkafka_record(f"a#consumer-{n}", refused.format(port=9093, ms=n))
        assert not limiter.filter(again)
    other = _librdkafka_record("a#producer-1", "Disconnected: connection reset by peer")
    assert limiter.filter(other), "another line is not held back by the first"
    clock.now += 2.0
    later = _librdkafka_record("a#producer-1", refused.format(port=9092, ms=1))
    assert limiter.filter(later) and later.repeated == 20  # type: ignore[attr-defined]


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """JSON logs for one test. A module's logger first used by an earlier test keeps the
    format of that time (``cache_logger_on_first_use``; a process configures its logs once):
    the clients' logger is taken fresh, and so is the librdkafka lines' repeat limiter (an
    earlier test's connect failures within its window would hold this test's back)."""
    librdkafka = logging.getLogger(LIBRDKAFKA)
    for old in [f for f in librdkafka.filters if isinstance(f, RepeatLimiter)]:
        librdkafka.removeFilter(old)
    configure_logging(LogSettings(format="json"))
    monkeypatch.setattr(clients_module, "log", structlog.get_logger(clients_module.__name__))
    yield
    configure_logging(LogSettings())


def test_in_json_mode_every_line_is_json_stdlib_and_librdkafka_too(
    json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real librdkafka client meeting a closed port for 3 s (longer until its first connect
    failure is written), and a stdlib warning: every line on stderr parses as JSON,
    librdkafka's with its fields, and the client's repeated connect failures come out a few
    times at most (the limiter's window is 10 s). Mutant caught: stdlib lines in plain text (the
    formatter of ``logging.basicConfig``)."""
    logging.getLogger("uvicorn.error").warning("plain %s", "stdlib")
    clients = KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:9"), "t")
    config = clients.producer_config(**{"reconnect.backoff.ms": 10})
    client = producer({**config, "reconnect.backoff.max.ms": 50}, clients.errors("t"))
    # Served for 3 s at least (about 60 failed connects, time for repeats to be held back),
    # and until the first connect failure was written, however slow the machine.
    err: list[str] = []
    started = time.monotonic()
    while time.monotonic() - started < 3.0 or not any("Connection refused" in e for e in err):
        assert time.monotonic() - started < 120, "librdkafka wrote no connect failure"
        client.poll(0.1)  # serves librdkafka's log lines (it returns after each)
        err.extend(capsys.readouterr().err.splitlines())
    del client
    lines = [line for line in err + capsys.readouterr().err.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    stdlib = [e for e in events if e.get("logger") == "uvicorn.error"]
    assert stdlib and stdlib[0]["event"] == "plain stdlib" and stdlib[0]["level"] == "warning"
    kafka = [e for e in events if e.get("event") == "librdkafka"]
    assert kafka, "librdkafka said nothing about the closed port"
    assert {"facility", "client", "message", "timestamp"} <= kafka[0].keys()
    refused = [e for e in kafka if "Connection refused" in e["message"]]
    assert 1 <= len(refused) <= 2, f"{len(refused)} connect failures written"


def test_records_of_structlog_and_the_stdlib_never_share_a_line(
    json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two threads logging at once, one through structlog, one through the stdlib (as
    librdkafka's lines come), with the interpreter switching threads as often as it can: every
    line is one JSON record. Mutant caught: structlog's ``print`` (record and newline in two
    writes under a lock of its own), which let a stdlib line land between them."""
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        stdlib = logging.getLogger("uvicorn.error")
        events = structlog.get_logger("test")

        def through_stdlib() -> None:
            for n in range(3000):
                stdlib.warning("s%d", n)

        def through_structlog() -> None:
            for n in range(3000):
                events.warning("t", n=n)

        threads = [threading.Thread(target=f) for f in (through_stdlib, through_structlog)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    lines = capsys.readouterr().err.split("\n")
    assert lines[-1] == ""
    records = [json.loads(line) for line in lines[:-1]]  # raises on a shared or empty line
    assert len(records) == 6000


class Recorder:
    """Stands in for a module's structlog logger: the events it was asked to write."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def warning(self, event: str, **_fields: object) -> None:
        self.events.append(event)


def test_clients_of_one_process_write_a_broker_error_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker's death reaches every client of a node at once: one ``kafka_client_error``
    line for the process, whatever ms or ports the texts carry. Mutants caught: a throttle per
    client (a line each); the key keeping numbers (a line per duration)."""
    written = Recorder()
    monkeypatch.setattr(clients_module, "log", written)
    clients = KafkaClients(KafkaSettings(bootstrap_servers="127.0.0.1:9"), "t")
    handlers = [clients.errors(name) for name in ("ingest", "admin", "watermark")]
    for n, handler in enumerate(handlers * 3):
        handler(KafkaError(KafkaError._TRANSPORT, f"127.0.0.1:9/1: Disconnected (after {n}ms)"))
    assert written.events == ["kafka_client_error"]

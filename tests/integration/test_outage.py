"""A broker outage longer than the producers' message timeout heals without a restart.

Its own broker (of the session's kind), because it is frozen: librdkafka then times out what
it had in flight and bumps its idempotent epoch itself. Apache Kafka accepts that; Tansu 0.6
answers PRODUCER_FENCED for good, so the node's and the client's producers must be replaced.
``scripts/outage_check.py`` runs the 60 s version under load.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chronos.devstack.brokers import LocalBroker, start_local_broker
from chronos.errors import ChronosError
from proxy import DelayClient
from proxy.client import DelayRequest
from tests.broker import is_tansu
from tests.integration.harness import Inbox, make_settings, running_node, wait_until

FREEZE_S = 8.0
TIMEOUT_MS = 3000  # producers' message.timeout.ms, well inside the freeze


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    started = start_local_broker("tansu" if is_tansu() else "kafka", tmp_path / "broker.log")
    yield started
    started.stop()


@pytest.mark.timeout(150)
def test_node_and_client_deliver_again_soon_after_a_long_freeze(
    broker: LocalBroker, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(
        broker.bootstrap,
        namespace,
        tmp_path / "store",
        delivery={"message_timeout_ms": TIMEOUT_MS},
        proxy={"ack_timeout_s": TIMEOUT_MS / 1000},
        admin={"port": 0, "kafka_silence_s": 2.0},
    )
    topic = f"{namespace}-target"
    accepted: set[str] = set()
    with (
        running_node(settings) as node,
        Inbox(settings, [topic]) as inbox,
        DelayClient(settings) as client,
    ):
        admin = httpx.Client(base_url=f"http://127.0.0.1:{node.admin_port}", timeout=10)
        wait_until(lambda: _kafka_check(admin)[0], 60, "the node sees Kafka")
        before = client.send_batch([DelayRequest(topic, b"b", delay=1.5) for _ in range(50)])
        accepted |= {r.id for r in before}
        # Due during the freeze: the node's producer times them out, then must recover.
        broker.freeze()
        frozen = time.monotonic()
        with pytest.raises(ChronosError):
            client.send_delay(topic, b"during", delay=0)  # times out: not accepted
        # The node's readiness sees the frozen broker (its health does not: a restart would
        # not bring Kafka back).
        wait_until(lambda: not _kafka_check(admin)[0], 60, "/readyz sees the frozen broker")
        ready = admin.get("/readyz")
        assert ready.status_code == 503 and "delivery is held" in _kafka_check(admin)[1]
        assert admin.get("/healthz").status_code == 200
        time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen)))
        broker.thaw()
        thawed = time.monotonic()
        recovered_in: float | None = None
        while recovered_in is None and time.monotonic() - thawed < 30:
            try:
                after = client.send_batch([DelayRequest(topic, b"a", delay=0) for _ in range(10)])
            except ChronosError:
                time.sleep(0.2)
                continue
            recovered_in = time.monotonic() - thawed
            accepted |= {r.id for r in after}
        assert recovered_in is not None, "the client never got a request acknowledged again"
        assert inbox.wait_for(accepted, timeout_s=60), (
            f"{len(accepted - inbox.by_id.keys())} acknowledged requests not delivered"
        )
        wait_until(lambda: _kafka_check(admin)[0], 60, "/readyz sees Kafka again")
        admin.close()
    assert recovered_in < 10, f"requests flowed again only {recovered_in:.1f} s after the thaw"


@pytest.mark.timeout(150)
def test_the_probes_see_a_stopped_broker(
    broker: LocalBroker, namespace: str, tmp_path: Path
) -> None:
    """The broker process killed (not frozen: its port refuses connections). Mutants caught:
    on 6c46988 ``/readyz`` stayed 200 and ``chronos_ready`` 1, saying the inner topic was
    applied up to its end, with nothing to apply it from; the node's stop then took the whole
    ``node.shutdown_timeout_s`` and was not clean."""
    settings = make_settings(
        broker.bootstrap,
        namespace,
        tmp_path / "store",
        delivery={"message_timeout_ms": TIMEOUT_MS},
        admin={"port": 0, "kafka_silence_s": 2.0},
    )
    with running_node(settings) as node:
        admin = httpx.Client(base_url=f"http://127.0.0.1:{node.admin_port}", timeout=10)
        wait_until(lambda: _kafka_check(admin)[0], 60, "the node sees Kafka")
        assert _ready_gauge(admin) == 1
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGKILL)  # as the issue saw it: gone at once, no shutdown
        wait_until(lambda: not _kafka_check(admin)[0], 60, "/readyz sees the stopped broker")
        assert admin.get("/readyz").status_code == 503
        assert _ready_gauge(admin) == 0
        assert admin.get("/healthz").status_code == 200  # a restart would not bring Kafka back
        admin.close()
        # Nothing was in flight: a stop with Kafka gone is clean, its last progress record
        # given up within the cut publisher's own limit (it waited again in the producer's
        # stop, past node.shutdown_timeout_s: node_stop_incomplete, exit code 1).
        assert node.stop(), "the stop with Kafka gone was not clean"


def _ready_gauge(admin: httpx.Client) -> float:
    """``chronos_ready`` from the node's ``/metrics``."""
    for family in text_string_to_metric_families(admin.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "chronos_ready":
                return float(sample.value)
    raise AssertionError("no chronos_ready on /metrics")


def _kafka_check(admin: httpx.Client) -> tuple[bool, str]:
    """The node's readiness check of Kafka: (ok, detail)."""
    check = admin.get("/readyz").json()["checks"]["kafka"]
    return bool(check["ok"]), str(check["detail"])

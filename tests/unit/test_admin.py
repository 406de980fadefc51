"""The admin API over a stub node, served for real on a loopback port: probes answer 200/503
naming each check, and /metrics is Prometheus text that its own parser reads back with the
node's numbers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chronos.admin.server import AdminServer
from chronos.admin.view import Check, Gauges, Report
from chronos.metrics import CountingMetrics


@dataclass
class StubNode:
    metrics: CountingMetrics = field(default_factory=CountingMetrics)
    disk_ok: bool = True
    caught_up: bool = False
    role: str = "master"

    def health(self) -> Report:
        return Report(
            [Check("components", True, "all running"), Check("disk", self.disk_ok, "x MiB")],
            {"role": self.role, "term": 3},
        )

    def readiness(self) -> Report:
        return Report([Check("ingest_caught_up", self.caught_up)], {"role": self.role})

    def gauges(self) -> Gauges:
        return Gauges(self.role, 3, 1_000, 3_500, 42, self.caught_up)


@pytest.fixture
def node() -> StubNode:
    return StubNode()


@pytest.fixture
def client(node: StubNode) -> Iterator[httpx.Client]:
    server = AdminServer(node, "127.0.0.1", 0)
    server.start()
    try:
        assert server.wait_started(10)
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as http:
            yield http
    finally:
        server.stop()
        server.join(5)
    assert not server.is_alive()


def test_health_and_readiness_answer_503_naming_the_failed_check(
    node: StubNode, client: httpx.Client
) -> None:
    """Mutant caught: a failed check answered with 200."""
    assert client.get("/healthz").status_code == 200
    node.disk_ok = False
    answer = client.get("/healthz")
    assert answer.status_code == 503
    body = answer.json()
    assert body["ok"] is False and body["checks"]["disk"] == {"ok": False, "detail": "x MiB"}
    assert body["role"] == "master" and body["term"] == 3
    assert client.get("/readyz").status_code == 503
    node.caught_up = True
    assert client.get("/readyz").json()["ok"] is True


def _families(client: httpx.Client) -> dict[str, object]:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(answer.text)}


def test_metrics_read_back_with_prometheus_parser_match_the_node(
    node: StubNode, client: httpx.Client
) -> None:
    """Counters as ``_total``, ms histograms in seconds with cumulative buckets and a sum,
    role, term and seek lag. Mutants caught: histograms exported in ms; buckets not
    cumulative; the role gauge set for every role."""
    node.metrics.incr("delivered", 5)
    node.metrics.incr("delivered", 2)
    node.metrics.incr("ingested", 9)
    for value_ms in (3, 40, 40, 7000):
        node.metrics.observe("send_lateness_ms", value_ms)
    families = _families(client)
    delivered = families["chronos_delivered"]
    samples = {s.name: s.value for s in delivered.samples}  # type: ignore[attr-defined]
    assert samples["chronos_delivered_total"] == 7
    lateness = families["chronos_send_lateness_seconds"]
    buckets = {
        s.labels["le"]: s.value
        for s in lateness.samples  # type: ignore[attr-defined]
        if s.name.endswith("_bucket")
    }
    assert buckets["0.005"] == 1 and buckets["0.05"] == 3 and buckets["5.0"] == 3
    assert buckets["10.0"] == 4 and buckets["+Inf"] == 4
    sums = [s.value for s in lateness.samples if s.name.endswith("_sum")]  # type: ignore[attr-defined]
    assert sums == [pytest.approx(7.083)]
    roles = {
        s.labels["role"]: s.value
        for s in families["chronos_role"].samples  # type: ignore[attr-defined]
    }
    assert roles == {"alone": 0.0, "master": 1.0, "backup": 0.0}
    term = families["chronos_term"].samples[0].value  # type: ignore[attr-defined]
    lag = families["chronos_seek_lag_seconds"].samples[0].value  # type: ignore[attr-defined]
    assert term == 3 and lag == pytest.approx(2.5)

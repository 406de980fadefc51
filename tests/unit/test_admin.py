"""The admin API over a stub node, served for real on a loopback port: probes answer 200/503
naming each check, and /metrics is Prometheus text that its own parser reads back with the
node's numbers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chronos.admin.server import AdminServer
from chronos.admin.view import Check, Gauges, Report
from chronos.clock import FakeClock
from chronos.metrics import CountingMetrics
from chronos.model import CancelRequest, DelayMessage
from chronos.runtime.probes import delivery_lag_ms
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.lookup import Lookup
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store.rocks import RocksStore

T0 = 1_700_000_040_000


@dataclass
class StubNode:
    """A node with a real store behind its lookups and stub probes."""

    store: RocksStore
    ledger: Ledger
    lookup: Lookup
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
        return Gauges(self.role, 3, T0 + 1_000, T0 + 3_500, 42, self.caught_up)

    def replicas(self) -> list[dict[str, object]]:
        return [{"node": "n1", "role": self.role, "term": 3}]

    def policies(self) -> dict[str, object]:
        return {"configured": {}, "live": {"orders": {"rate": 5.0}}}

    @property
    def local_lookup(self) -> Lookup:
        return self.lookup


@pytest.fixture
def node(tmp_path: Path) -> Iterator[StubNode]:
    store = RocksStore(tmp_path / "store", StoreSettings())
    ledger = Ledger(store, Frontier(0), FakeClock(T0), DeleteSettings())
    yield StubNode(store, ledger, Lookup(store, ledger))
    store.close()


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


def test_a_topic_lateness_is_one_family_with_a_series_per_topic(
    node: StubNode, client: httpx.Client
) -> None:
    """Mutant caught: each topic's histogram exported as a family of its own (a name per topic,
    which no dashboard can sum)."""
    node.metrics.observe("topic_lateness_ms:orders", 3)
    node.metrics.observe("topic_lateness_ms:orders", 300)
    node.metrics.observe("topic_lateness_ms:pay.ments", 40)
    families = _families(client)
    assert not [name for name in families if "orders" in name or "ments" in name]
    family = families["chronos_topic_lateness_seconds"]
    counts = {
        s.labels["topic"]: s.value
        for s in family.samples  # type: ignore[attr-defined]
        if s.name.endswith("_count")
    }
    assert counts == {"orders": 2, "pay.ments": 1}


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
    # A counter nothing has counted yet is there at 0 (a rate() sees its first event).
    cancelled = families["chronos_cancelled"].samples  # type: ignore[attr-defined]
    assert [(c.name, c.value) for c in cancelled] == [("chronos_cancelled_total", 0)]
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


def test_message_status_listing_and_forecast_over_http(
    node: StubNode, client: httpx.Client
) -> None:
    """Mutants caught: an unknown id answered 404 (indistinguishable from a wrong URL), a bad
    query parameter answered 500, a forecast served from counts not yet built."""
    node.ledger.apply(
        [DelayMessage(f"m{n}", "orders", None, b"v", [], T0 + 60_000 + n) for n in range(5)]
        + [CancelRequest("m4")]
    )
    assert client.get("/v1/messages/m1").json() == {
        "id": "m1",
        "state": "pending",
        "topic": "orders",
        "due_ms": T0 + 60_001,
        "slot_ms": T0 + 60_001,
        "occurrence": 1,
        "times": 1,
    }
    assert client.get("/v1/messages/m4").json()["cancel"] == "removed"
    unknown = client.get("/v1/messages/no%2Fsuch")
    assert unknown.status_code == 200 and unknown.json() == {"id": "no/such", "state": "unknown"}
    page = client.get("/v1/messages", params={"limit": 3, "topic": "orders"}).json()
    assert [row["id"] for row in page["rows"]] == ["m0", "m1", "m2"]
    rest = client.get("/v1/messages", params={"cursor": page["cursor"]}).json()
    assert [row["id"] for row in rest["rows"]] == ["m3"] and rest["cursor"] is None
    for bad in (
        {"state": "lost"},
        {"limit": "ten"},
        {"limit": 0},
        {"cursor": "zz"},
        {"to_ms": -5},
        {"from_ms": "99999999999999999999999"},
        {"to_ms": str(1 << 64)},
    ):
        answer = client.get("/v1/messages", params=bad)
        assert answer.status_code == 400 and "error" in answer.json(), (bad, answer.text)
    assert client.get("/v1/forecast").status_code == 503
    node.store.start_due_counts()
    assert node.store.due_counts.wait_ready(10)
    forecast = client.get("/v1/forecast", params={"horizon_s": 300, "bucket_s": 60}).json()
    assert forecast["from_ms"] == T0 and forecast["counts"] == [0, 4, 0, 0, 0]
    assert forecast["total"] == 4
    for bad_bucket in (45, 0, -60, 10**30):
        answer = client.get("/v1/forecast", params={"bucket_s": bad_bucket})
        assert answer.status_code == 400 and "bucket_s" in answer.json()["error"], answer.text
    asked = client.get("/v1/forecast", params={"horizon_s": 300, "repeats": "true"}).json()
    assert (asked["counts"], asked["repeats"], asked["repeats_complete"]) == (
        [0, 4, 0, 0, 0],
        0,
        True,
    )
    answer = client.get("/v1/forecast", params={"repeats": "yes"})
    assert answer.status_code == 400 and "repeats" in answer.json()["error"], answer.text


def test_overview_has_role_term_lag_and_replicas(node: StubNode, client: httpx.Client) -> None:
    node.metrics.incr("delivered", 5)
    node.metrics.observe("ack_lateness_ms", 20)
    body = client.get("/v1/overview").json()
    assert (body["role"], body["term"], body["totals"]["delivered"]) == ("master", 3, 5)
    assert body["seek_lag_s"] == pytest.approx(2.5)
    assert sum(body["lateness"]["counts"]) == 1
    assert len(body["lateness"]["counts"]) == len(body["lateness"]["bounds_s"]) + 1
    assert body["replicas"] == [{"node": "n1", "role": "master", "term": 3}]


def test_the_dashboard_keeps_to_itself_and_no_slash_redirects(client: httpx.Client) -> None:
    """Mutants caught: the page served without a CSP or frame protection; a trailing slash
    redirected to whatever host the request named."""
    page = client.get("/dashboard")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "script-src 'sha256-" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    slash = client.get("/healthz/", headers={"host": "evil.example"})
    assert slash.status_code == 404 and "location" not in slash.headers


def test_delivery_lag_is_how_late_the_oldest_message_past_the_seek_is(node: StubNode) -> None:
    """An idle node's seek lags its clock by up to half a minute between scans, harmlessly:
    the delivery lag is 0 while nothing past the seek is due, and counts from the oldest due
    message's slot once one is. Mutant caught: the seek lag reported as the delivery lag."""
    seek = node.ledger.seek_ms
    assert delivery_lag_ms(node.store, seek, seek + 25_000) == 0  # nothing stored
    node.ledger.apply([DelayMessage("later", "orders", None, b"v", [], seek + 60_000)])
    assert delivery_lag_ms(node.store, seek, seek + 25_000) == 0  # due in 35 s
    node.ledger.apply([DelayMessage("due", "orders", None, b"v", [], seek + 20_000)])
    assert delivery_lag_ms(node.store, seek, seek + 25_000) == 5_000


def test_policies_answer_what_the_node_delivers_with(client: httpx.Client) -> None:
    answer = client.get("/v1/policies")
    assert answer.status_code == 200
    assert answer.json() == {"configured": {}, "live": {"orders": {"rate": 5.0}}}

"""A node's admin API on the real broker: its probes while it runs, and /metrics, read with
Prometheus' own parser, agreeing with what a consumer of the target topic received."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, running_node, wait_until


def _scrape(http: httpx.Client) -> dict[str, float]:
    """Every sample of /metrics by name (labels folded into the name)."""
    answer = http.get("/metrics")
    assert answer.status_code == 200
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_metrics_match_what_was_delivered_and_probes_answer(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    """Mutants caught: a counter the collector does not export or miscounts; a probe that
    never answers 200 on a healthy node. (A probe answering 200 too early is the unit test's.)"""
    settings = make_settings(kafka_bootstrap, namespace, tmp_path / "store")
    topic = f"{namespace}-target"
    count = 60
    with running_node(settings) as node, Inbox(settings, [topic]) as inbox:
        port = node.admin_port
        assert port is not None
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            health = http.get("/healthz")
            assert health.status_code == 200, health.text
            assert health.json()["role"] == "alone"
            wait_until(lambda: http.get("/readyz").status_code == 200, 60, "the node is ready")
            with DelayClient(settings) as client:
                ids = {
                    client.send_delay(topic, f"v{i}", delay=0.3, id=f"m{i}").id
                    for i in range(count)
                }
                assert inbox.wait_for(ids, 60)
                # Markers after them: a duplicate would have come first.
                markers = inbox.settle(client, topic, settings.topics.inner_partitions)
            assert sum(inbox.count(i) for i in ids) == count
            received = sum(inbox.count(i) for i in ids | markers)
            wait_until(
                lambda: _scrape(http).get("chronos_delivered_total") == received,
                60,
                "chronos_delivered_total reaches what the consumer received",
            )
            samples = _scrape(http)
            assert samples["chronos_ingested_total"] >= count
            assert samples["chronos_role{role=alone}"] == 1.0
            assert samples["chronos_ready"] == 1.0
            lateness = samples["chronos_send_lateness_seconds_count"]
            assert 1 <= lateness <= received  # one observation per acknowledged batch
            assert samples["chronos_seek_lag_seconds"] < 60

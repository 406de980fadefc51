"""Fuzz the HTTP proxy from its own OpenAPI schema (schemathesis), with tokens on, a node
answering status questions and a real broker taking every accepted request.

Held to every check schemathesis has but one (``_EXCLUDED_CHECKS``, said why): no 5xx and no
hang (every request answered within 10 s); every status code, content type, header and body
as the schema documents; whatever the schema calls valid accepted (``positive_data_acceptance``;
but a due time past ``limits.max_delay_s`` or a payload that is not base64 under
``encoding: base64``, rules the schema does not state: schema_fuzz_hooks.py)
and whatever it calls invalid refused (``negative_data_rejection``: the schema states the
server's rules, proxy/http/openapi_rules.py); ``Allow`` naming every method of a path;
and nothing accepted that the wire format then refuses: every record the proxy put on the inner
topic passes the check a node applies before it stores one (``accept_inner``), so none would be
dead-lettered.

Run once per suite, in the Apache Kafka pass: it fuzzes the proxy's HTTP contract, which is the
same whatever broker takes the records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Consumer, TopicPartition

from chronos.errors import DecodeError
from chronos.inner import accept_inner
from chronos.settings import ChronosSettings
from chronos.types import Headers
from chronos.web.tokens import hash_token, new_token
from proxy.http.server import ProxyServer
from tests.broker import is_tansu
from tests.integration.harness import make_settings, running_node

#: Every check of schemathesis but ``use_after_free`` (ST301: a resource still answering 200
#: after its DELETE): a cancel is a request (202 ``cancel_accepted``), and the status of a
#: cancelled message is documented as ``200 {"state": "cancelled", "cancel": ...}``, which tells
#: the caller what the cancel did; a 404 would not.
REPO = Path(__file__).resolve().parents[2]
_CHECKS = "all"
_EXCLUDED_CHECKS = "use_after_free"
#: Per operation and phase: 1,261 cases in all, 24 s here (the floor below is 1,000: 30 made
#: 975; 200 made 2,500-2,900 in 100-115 s on 2 loaded cores, more than the suite's budget
#: spares: issue 60).
_MAX_EXAMPLES = 50


def _schemathesis() -> str:
    found = shutil.which("st", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("schemathesis is not installed (pip install -e '.[test]')")
    return found


def _tokens(path: Path, token: str, status_token: str) -> Path:
    """The fuzzer's token (every proxy operation, any topic) and the one the proxy presents
    to the node's admin API for status questions."""
    path.write_text(
        f'[[tokens]]\nname = "fuzzer"\nsha256 = "{hash_token(token)}"\ntopics = ["*"]\n'
        'operations = ["send", "cancel", "reschedule", "status"]\n'
        f'[[tokens]]\nname = "proxy"\nsha256 = "{hash_token(status_token)}"\n'
        'operations = ["admin"]\n'
    )
    return path


_Record = tuple[bytes | None, bytes | None, Headers]


def _inner_records(settings: ChronosSettings) -> list[_Record]:
    """Every record on the inner topic, read to the end of each partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka.bootstrap_servers,
            "group.id": "schema-fuzz-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    topic = settings.topics.names.inner
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[_Record] = []
        deadline = time.monotonic() + 60
        done = {p for p, end in ends.items() if end == 0}
        while len(done) < len(ends) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            headers = cast("Headers", message.headers() or [])
            records.append((message.key(), message.value(), headers))
            if (message.offset() or 0) + 1 >= ends[message.partition() or 0]:
                done.add(message.partition())
        assert len(done) == len(ends), "the inner topic could not be read to its end"
        return records
    finally:
        consumer.close()


# A hang net, not a bound on speed: schemathesis alone may take its 600 s on a loaded machine.
@pytest.mark.timeout(900)
def test_fuzz_from_the_openapi_schema(kafka_bootstrap: str, namespace: str, tmp_path: Path) -> None:
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass (the HTTP contract it fuzzes)")
    token, status_token = new_token(), new_token()
    settings = make_settings(
        kafka_bootstrap,
        namespace,
        tmp_path / "store",
        admin={"port": 0},
        security={"tokens_file": str(_tokens(tmp_path / "tokens.toml", token, status_token))},
        proxy={"status_token": status_token},
    )
    with running_node(settings) as node:
        proxy_settings = settings.model_copy(
            update={
                "proxy": settings.proxy.model_copy(
                    update={"status_nodes": [f"http://127.0.0.1:{node.admin_port}"]},
                )
            }
        )
        server = ProxyServer(proxy_settings)
        server.start()
        try:
            assert server.wait_started(10)
            report, dropped = tmp_path / "report.json", tmp_path / "dropped.txt"
            cron_fields = tmp_path / "cron_fields.txt"
            run = subprocess.run(
                [
                    _schemathesis(),
                    "run",
                    f"http://127.0.0.1:{server.port}/openapi.json",
                    "--header",
                    f"Authorization: Bearer {token}",
                    "--checks",
                    _CHECKS,
                    "--exclude-checks",
                    _EXCLUDED_CHECKS,
                    "--max-examples",
                    str(_MAX_EXAMPLES),
                    "--seed",
                    "20261124",
                    "--workers",
                    "1",
                    "--request-timeout",
                    "10",
                    "--report",
                    "json",
                    "--report-json-path",
                    str(report),
                    "--no-color",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                env={
                    **os.environ,
                    "SCHEMATHESIS_HOOKS": "tests.integration.schema_fuzz_hooks",
                    "PYTHONPATH": str(REPO),
                    "CHRONOS_TEST_FUZZ_DROPPED": str(dropped),
                    "CHRONOS_TEST_FUZZ_CRON": str(cron_fields),
                },
            )
        finally:
            server.stop()
            server.join(10)
    print(run.stdout[-6000:])
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-4000:]
    cases = json.loads(report.read_text())["test_cases"]
    assert cases["generated"] >= 1000 and cases["with_failures"] == 0, cases

    refused = []
    records = _inner_records(settings)
    now_ms = int(time.time() * 1000)
    for key, value, headers in records:
        try:
            accept_inner(key, value, headers, settings.limits, settings.topics.names, now_ms)
        except DecodeError as exc:
            refused.append(str(exc))
    assert records, "the fuzzer got nothing accepted: the schema or the token is wrong"
    assert not refused, refused[:10]
    clock = dropped.read_text().splitlines() if dropped.exists() else []
    drawn = cron_fields.read_text().splitlines() if cron_fields.exists() else []
    zones = {line for line in drawn if line.startswith("zone ")}
    expressions = {line for line in drawn if line.startswith("cron ")}
    # Issue 62: the cron fields are fuzzed with the hooks' lists, not only random strings.
    assert len(zones) >= 5 and len(expressions) >= 5, (len(drawn), len(zones), len(expressions))
    print(
        f"schema fuzz: {cases['generated']} cases, {len(records)} inner records all accepted, "
        f"{len(clock)} valid requests refused only by a rule the schema does not state "
        f"(schema_fuzz_hooks.py); {len(drawn)} cron fields drawn from its lists ({len(zones)} "
        f"zones, {len(expressions)} expressions)"
    )

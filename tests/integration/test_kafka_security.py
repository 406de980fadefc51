"""chronos through Apache Kafka's SASL and TLS listeners: a replica group's node (transactions,
election, progress), the Python client, the HTTP proxy and ``chronos group`` connect through
each and deliver; the Spark pipeline schedules and audits through SASL/SCRAM; a wrong password is
refused; the password never reaches the logs.

A broker of its own, with three client listeners: PLAINTEXT (the test's own consumer and topic
set-up), SASL_PLAINTEXT with the PLAIN mechanism, and SSL with a certificate the test makes
(trustme; Kafka reads PEM from its properties).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trustme
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # exported, no __all__
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives import serialization

from chronos.cli.main import main as chronos_main
from chronos.devstack.kafka import KafkaBroker, Listener
from chronos.devstack.tansu import free_port
from chronos.errors import NotAcknowledged
from chronos.pipeline.main import main as pipeline_main
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from proxy.http.server import ProxyServer
from tests.integration.harness import (
    Inbox,
    group_settings,
    make_settings,
    role_of,
    running_node,
    wait_until,
)

pytestmark = pytest.mark.kafka_only(reason="SASL and TLS listeners of Apache Kafka")

PASSWORD = "s3cret-pw-7f2a"
USER = "chronos"
SCRAM = "SCRAM-SHA-256"


@dataclass(frozen=True)
class Secured:
    """The broker's addresses and what a client needs for each."""

    plaintext: str
    sasl: str
    tls: str
    ca_file: Path

    def kafka(self, listener: str, password: str = PASSWORD) -> dict[str, Any]:
        """The ``[kafka]`` section of a client of ``listener``: ``sasl`` (PLAIN), ``scram``
        (SCRAM-SHA-256 on the same SASL listener) or ``tls``."""
        if listener in ("sasl", "scram"):
            return {
                "bootstrap_servers": self.sasl,
                "sasl_password": password,
                "client_config": {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN" if listener == "sasl" else SCRAM,
                    "sasl.username": USER,
                },
            }
        return {
            "bootstrap_servers": self.tls,
            "client_config": {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_file)},
        }


def _pem_property(pem: bytes) -> str:
    """A PEM block as one properties-file line (Java reads ``\\n`` as a newline)."""
    return pem.decode().strip().replace("\n", "\\n")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    pkcs8 = key.private_bytes(  # Kafka's PEM keystore reads PKCS#8 only
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    sasl_port, tls_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    broker = KafkaBroker(
        properties={
            "sasl.enabled.mechanisms": f"PLAIN,{SCRAM}",
            "listener.name.sasl.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{USER}="{PASSWORD}";'
            ),
            f"listener.name.sasl.{SCRAM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.tls.ssl.keystore.type": "PEM",
            "listener.name.tls.ssl.keystore.key": _pem_property(pkcs8),
            "listener.name.tls.ssl.keystore.certificate.chain": _pem_property(
                b"".join(blob.bytes() for blob in cert.cert_chain_pems)
            ),
        },
        listeners=[
            Listener("SASL", "SASL_PLAINTEXT", sasl_port),
            Listener("TLS", "SSL", tls_port),
        ],
    ).start()
    try:
        _add_scram_user(broker.bootstrap)
        yield Secured(
            broker.bootstrap, f"127.0.0.1:{sasl_port}", f"127.0.0.1:{tls_port}", folder / "ca.pem"
        )
    finally:
        broker.stop()


def _add_scram_user(plaintext: str) -> None:
    """SCRAM credentials live in the cluster's metadata: set through the admin API."""
    admin = AdminClient({"bootstrap.servers": plaintext})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    upsert = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def _config_file(path: Path, settings: ChronosSettings) -> Path:
    kafka = settings.kafka
    assert kafka.sasl_password is None or kafka.sasl_password.get_secret_value()
    lines = [
        "[kafka]",
        f'bootstrap_servers = "{kafka.bootstrap_servers}"',
        "client_config = {"
        + ", ".join(f'"{k}" = "{v}"' for k, v in kafka.client_config.items())
        + "}",
        "[topics]",
        f'namespace = "{settings.topics.namespace}"',
        "[group]",
        f'name = "{settings.group.name}"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("listener", ["sasl", "scram", "tls"])
def test_node_client_proxy_and_group_cli_through_a_secured_listener(
    secured: Secured,
    listener: str,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = group_settings(secured.sasl, namespace, tmp_path, "a", kafka=secured.kafka(listener))
    plain = make_settings(secured.plaintext, namespace, tmp_path / "unused")
    topic = f"{namespace}-target"
    with Inbox(plain, [topic]) as inbox, running_node(settings) as node:
        wait_until(lambda: role_of(node) == "master", 60, "the node leads its group")
        with DelayClient(settings) as client:
            for n in range(20):
                client.send_delay(topic, b"v", delay=0.5, id=f"c{n}")
        proxy = ProxyServer(
            settings.model_copy(update={"proxy": settings.proxy.model_copy(update={"port": 0})})
        )
        proxy.start()
        try:
            assert proxy.wait_started(10)
            answer = httpx.post(
                f"http://127.0.0.1:{proxy.port}/v1/messages",
                json={"topic": topic, "value": "p", "delay_ms": 500, "id": "via-proxy"},
                timeout=30,
            )
            assert answer.status_code == 201, answer.text
        finally:
            proxy.stop()
            proxy.join(10)
        expected = {f"c{n}" for n in range(20)} | {"via-proxy"}
        assert inbox.wait_for(expected, 60), "not everything was delivered"
        assert all(inbox.count(i) == 1 for i in expected)
        # `chronos group` through the same listener (the password from the environment).
        if settings.kafka.sasl_password is not None:
            monkeypatch.setenv("CHRONOS_KAFKA__SASL_PASSWORD", PASSWORD)
        assert (
            chronos_main(["group", "--config", str(_config_file(tmp_path / "c.toml", settings))])
            == 0
        )


def test_a_wrong_sasl_password_is_refused(secured: Secured, namespace: str, tmp_path: Path) -> None:
    settings = make_settings(
        secured.sasl,
        namespace,
        tmp_path / "store",
        kafka=secured.kafka("sasl", password="wrong"),
        proxy={"ack_timeout_s": 5},
    )
    with DelayClient(settings) as client, pytest.raises(NotAcknowledged):
        client.send_delay(f"{namespace}-target", b"v", delay=1)


def test_the_password_never_reaches_the_logs(
    secured: Secured, namespace: str, tmp_path: Path
) -> None:
    """``chronos run`` through the SASL listener at debug level, JSON logs, a message through
    it, then SIGTERM: its whole output, librdkafka's lines included, holds no password."""
    plain = make_settings(secured.plaintext, namespace, tmp_path / "unused")
    topic = f"{namespace}-target"
    config = tmp_path / "chronos.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{secured.sasl}"\n'
        'client_config = {"security.protocol" = "SASL_PLAINTEXT", "sasl.mechanism" = "PLAIN", '
        f'"sasl.username" = "{USER}", "debug" = "security"}}\n'
        f'[topics]\nnamespace = "{namespace}"\n'
        f'[node]\nnode_id = "a"\ndata_dir = "{tmp_path / "store"}"\n'
        '[log]\nformat = "json"\nlevel = "debug"\n'
    )
    env = {**os.environ, "CHRONOS_KAFKA__SASL_PASSWORD": PASSWORD}
    with Inbox(plain, [topic]) as inbox:
        node = subprocess.Popen(
            [sys.executable, "-m", "chronos.cli.entry", "run", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            settings = make_settings(
                secured.sasl, namespace, tmp_path / "unused", kafka=secured.kafka("sasl")
            )
            with DelayClient(settings) as client:
                client.send_delay(topic, b"v", delay=0.2, id="logged")
            assert inbox.wait_for({"logged"}, 60)
        finally:
            node.send_signal(signal.SIGTERM)
            output, _ = node.communicate(timeout=60)
    text = output.decode(errors="replace")
    assert "node_started" in text or "ingest_caught_up" in text, text[-2000:]
    assert PASSWORD not in text, "the SASL password reached the logs"


# A safety net against a hang, not a bound on speed: Spark's JVM alone takes minutes on a
# loaded machine (the default 180 s passed under stress-ng, and a job cut off mid-call breaks
# the session every later Spark test shares).
@pytest.mark.timeout(600)
def test_pipeline_schedules_and_audits_through_scram(
    secured: Secured, spark: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Spark jobs connect as the node does: ``schedule`` produces the inner records and
    ``audit`` reads the inner and target topics through SASL (the password from the
    environment, passed to Spark's executors with the settings)."""
    settings = make_settings(
        secured.sasl, namespace, tmp_path / "store", kafka=secured.kafka("sasl")
    )
    plain = make_settings(secured.plaintext, namespace, tmp_path / "unused")
    topic = f"{namespace}-target"
    started = int(time.time() * 1000)
    source = tmp_path / "in.parquet"
    ids = [f"p{n}" for n in range(30)]
    pq.write_table(
        pa.table(
            {
                "id": ids,
                "topic": [topic] * len(ids),
                "value": ["v"] * len(ids),
                "delay": ["1s"] * len(ids),
            }
        ),
        source,
    )
    config = tmp_path / "pipeline.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{secured.sasl}"\n'
        'client_config = {"security.protocol" = "SASL_PLAINTEXT", '
        f'"sasl.mechanism" = "{SCRAM}", '
        f'"sasl.username" = "{USER}"}}\n[topics]\nnamespace = "{namespace}"\n'
    )
    monkeypatch.setenv("CHRONOS_KAFKA__SASL_PASSWORD", PASSWORD)
    with Inbox(plain, [topic]) as inbox, running_node(settings):
        assert pipeline_main(["schedule", "--config", str(config), "--input", str(source)]) == 0
        assert inbox.wait_for(set(ids), 60), "the scheduled rows were not delivered"
    out = tmp_path / "audit"
    window = ["--from", str(started - 1000), "--to", str(started + 60_000)]
    code = pipeline_main(["audit", "--config", str(config), *window, "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["messages"] == len(ids), summary
    assert summary["counts"]["on_time"] == len(ids), summary

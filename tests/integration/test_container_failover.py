"""Failover on the real images, through testcontainers: Apache Kafka (chronos-kafka:local) and
two chronos nodes of one group (chronos:local), each its own container, under a steady load
sent from the host. The master container is ``docker kill``ed; then the new master is
``docker pause``d past the failure detector's patience and resumed (a zombie: it wakes up
believing it is master, and fencing must stop it). A ``read_committed`` consumer must see every
message exactly once. The Kafka image's optional SASL listener carries a node's and a client's
traffic, and refuses a wrong password.

Host networking: the broker advertises 127.0.0.1 to the nodes and to the test alike. Skipped,
saying why, where no Docker daemon answers; run once per suite, in the Apache Kafka pass.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException

from chronos.devstack.tansu import free_port
from chronos.errors import ConfigError, NotAcknowledged
from chronos.group.spec import GroupSpec
from chronos.group.status import group_status
from chronos.kafka.clients import KafkaClients
from chronos.settings import ChronosSettings
from proxy.client import DelayClient, DelayRequest
from tests.broker import docker_available, is_tansu, wait_until_ready
from tests.integration.harness import (
    Inbox,
    group_settings,
    make_settings,
    role_of,
    running_node,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
GROUP = "containers"
RATE_PER_S = 400


@pytest.fixture(scope="module")
def images() -> None:
    """chronos:local and chronos-kafka:local, built once for the module (Docker's cache makes a
    rebuild of an unchanged tree take seconds, but a fresh machine first builds both bases
    from the Debian mirror: minutes, bounded by its own limit and not by the tests')."""
    _needs_docker()
    subprocess.run(["bash", str(REPO / "docker" / "build.sh")], check=True, timeout=900)


def _container(image: str, env: dict[str, str]) -> Any:
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # no registry for Ryuk
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image).with_kwargs(network_mode="host")
    for key, value in env.items():
        container = container.with_env(key, value)
    return container


def _needs_docker() -> None:
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass (it brings its own broker)")
    if not docker_available():
        pytest.skip("no Docker daemon answers here")


@pytest.fixture
def deployment(
    images: None, namespace: str, tmp_path: Path
) -> Iterator[tuple[ChronosSettings, dict[str, Any]]]:
    port, controller = free_port("127.0.0.1"), free_port("127.0.0.1")
    bootstrap = f"127.0.0.1:{port}"
    with ExitStack() as stack:
        kafka = _container(
            "chronos-kafka:local",
            {
                "KAFKA_ADVERTISED_HOST": "127.0.0.1",
                "KAFKA_PORT": str(port),
                "KAFKA_CONTROLLER_PORT": str(controller),
            },
        )
        kafka.start()
        stack.callback(kafka.stop)
        wait_until_ready(bootstrap, 90)
        nodes: dict[str, Any] = {}
        for name in ("a", "b"):
            node = _container(
                "chronos:local",
                {
                    "CHRONOS_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
                    "CHRONOS_TOPICS__NAMESPACE": namespace,
                    "CHRONOS_GROUP__NAME": GROUP,
                    "CHRONOS_NODE__NODE_ID": name,
                    "CHRONOS_ADMIN__PORT": str(free_port("127.0.0.1")),
                },
            )
            node.start()
            stack.callback(node.stop)
            nodes[name] = node
        settings = make_settings(bootstrap, namespace, tmp_path / "unused", group={"name": GROUP})
        yield settings, nodes


def _master(settings: ChronosSettings) -> str | None:
    spec = GroupSpec.of(settings)
    assert spec is not None
    try:
        return group_status(spec, KafkaClients(settings.kafka, "test"), 5.0).master
    # The group's coordinator or a leader still loading right after the broker start, or a
    # loaded machine answering later than the call's 5 s (CI, 2026-11-26): not known yet.
    except (ConfigError, KafkaException, concurrent.futures.TimeoutError):
        return None


def _docker(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True, timeout=60)


class _Load(threading.Thread):
    """RATE_PER_S messages a second from the host, each due 0.5-2 s later, until stopped."""

    def __init__(self, client: DelayClient, topic: str) -> None:
        super().__init__(daemon=True)
        self._client, self._topic = client, topic
        self.sent: set[str] = set()
        self._done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._done.is_set():
            started = time.monotonic()
            ids = [f"m{n + i}" for i in range(RATE_PER_S // 10)]
            self._client.send_batch(
                [
                    DelayRequest(self._topic, b"v", delay=0.5 + (i % 16) / 10, id=message_id)
                    for i, message_id in enumerate(ids)
                ]
            )
            self.sent.update(ids)
            n += len(ids)
            self._done.wait(max(0.0, 0.1 - (time.monotonic() - started)))

    def stop(self) -> None:
        self._done.set()
        self.join(30)


@pytest.mark.timeout(180, func_only=True)  # the image build in the fixture has its own limit
def test_kill_and_pause_the_master_container_under_load(
    deployment: tuple[ChronosSettings, dict[str, Any]], namespace: str
) -> None:
    settings, nodes = deployment
    topic = f"{namespace}-target"
    wait_until(lambda: _master(settings) in nodes, 90, "a master delivers")
    with Inbox(settings, [topic]) as inbox, DelayClient(settings) as client:
        load = _Load(client, topic)
        load.start()
        try:
            time.sleep(5)
            # The second node's join can rebalance the election group: no master for a moment.
            seen: list[str | None] = []

            def master_seen() -> bool:
                seen.append(_master(settings))
                return seen[-1] in nodes

            wait_until(master_seen, 60, "a master after both joined")
            first = seen[-1]
            assert first is not None
            _docker("kill", nodes[first].get_wrapped_container().id)
            survivor = "b" if first == "a" else "a"
            wait_until(lambda: _master(settings) == survivor, 60, f"{survivor} took over")
            time.sleep(5)
            _docker("start", nodes[first].get_wrapped_container().id)  # back, as backup
            time.sleep(15)
            paused = nodes[survivor].get_wrapped_container().id
            _docker("pause", paused)
            wait_until(lambda: _master(settings) == first, 60, f"{first} took over a zombie")
            time.sleep(3)
            _docker("unpause", paused)  # wakes up as master of a past term: fenced
            wait_until(
                lambda: b"became_backup" in b"".join(nodes[survivor].get_logs()),
                60,
                f"the zombie {survivor} turned into a backup",
            )
            time.sleep(5)
        finally:
            load.stop()
        assert inbox.wait_for(load.sent, 90), f"{len(load.sent - set(inbox.by_id))} lost"
        time.sleep(3)
        duplicates = [i for i in load.sent if inbox.count(i) > 1]
    assert not duplicates, f"{len(duplicates)} delivered twice, e.g. {duplicates[:5]}"
    assert len(load.sent) > 10 * RATE_PER_S


@pytest.mark.timeout(180, func_only=True)
def test_the_kafka_images_sasl_listener(images: None, namespace: str, tmp_path: Path) -> None:
    """KAFKA_SASL_PORT/KAFKA_SASL_USERS: a replica (transactions, election) and the client
    deliver through SASL_PLAINTEXT/PLAIN; a wrong password is refused."""
    port, sasl_port, controller = (free_port("127.0.0.1") for _ in range(3))
    kafka = _container(
        "chronos-kafka:local",
        {
            "KAFKA_ADVERTISED_HOST": "127.0.0.1",
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(controller),
            "KAFKA_SASL_PORT": str(sasl_port),
            "KAFKA_SASL_USERS": "chronos:s3cret,other:x",
        },
    )
    kafka.start()
    try:
        wait_until_ready(f"127.0.0.1:{port}", 90)

        def sasl(password: str) -> dict[str, Any]:
            return {
                "bootstrap_servers": f"127.0.0.1:{sasl_port}",
                "sasl_password": password,
                "client_config": {
                    "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "chronos",
                },
            }

        settings = group_settings(
            f"127.0.0.1:{sasl_port}", namespace, tmp_path, "a", kafka=sasl("s3cret")
        )
        plain = make_settings(f"127.0.0.1:{port}", namespace, tmp_path / "unused")
        topic = f"{namespace}-target"
        ids = {f"s{n}" for n in range(20)}
        with Inbox(plain, [topic]) as inbox, running_node(settings) as node:
            wait_until(lambda: role_of(node) == "master", 90, "the node leads its group")
            with DelayClient(settings) as client:
                for message_id in sorted(ids):
                    client.send_delay(topic, b"v", delay=0.5, id=message_id)
            assert inbox.wait_for(ids, 60), f"{len(ids - set(inbox.by_id))} not delivered"
            assert all(inbox.count(i) == 1 for i in ids)
        wrong = make_settings(
            f"127.0.0.1:{sasl_port}",
            namespace,
            tmp_path / "wrong",
            kafka=sasl("wrong"),
            proxy={"ack_timeout_s": 5},
        )
        with DelayClient(wrong) as client, pytest.raises(NotAcknowledged):
            client.send_delay(topic, b"v", delay=1)
    finally:
        kafka.stop()

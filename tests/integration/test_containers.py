"""The images built here (docker/build.sh) as users deploy them.

The compose deployment docs/containers.md gives: a message sent through the proxy container
arrives; killing the master container moves delivery to the backup; the new master frozen
(``docker pause``) past the failure detector's patience is taken over, and thawed, it is fenced
and turns into a backup (a zombie); then the rolling restart (each node recreated and healthy
before the next); messages keep coming through the proxy from the kill on, and every one
arrives exactly once (scripts/compose_check.py, whose summary this prints). One stack for all
of it (issue 60: the failover test ran a second deployment through testcontainers).

Once with each compose command (Debian's docker-compose 1.29 and the docker compose v2 plugin):
v1 is a smoke test (up, deliver through the proxy, down), v2 does the faults (the same compose
commands in either). And the Kafka image's optional SASL listener. Skipped, saying why, where no
Docker daemon answers or a compose command is missing; run once per suite (in the Apache Kafka
pass: the deployment brings its own Apache Kafka image).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chronos.devstack.tansu import free_port
from chronos.errors import NotAcknowledged
from proxy.client import DelayClient
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


def _compose_available(version: str) -> bool:
    if version == "v1":
        return shutil.which("docker-compose") is not None
    found = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return found.returncode == 0


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_compose_group_delivers_through_the_proxy_and_fails_over(version: str) -> None:
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass (it brings its own broker)")
    if not docker_available():
        pytest.skip("no Docker daemon answers here")
    if not _compose_available(version):
        command = "docker-compose" if version == "v1" else "docker compose"
        pytest.skip(f"{command} is not installed (docker/compose-v2.sh builds the v2 plugin)")
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "compose_check.py"),
            "--build",
            "--messages",
            "30",
            "--compose",
            version,
            # v1 (Debian's docker-compose 1.29) only up, deliver, down: the faults are the same
            # compose commands under either.
            *(["--zombie", "--rolling"] if version == "v2" else ["--smoke"]),
        ],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    summary_line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    print(summary_line)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads(summary_line)
    assert summary["delivered"] == summary["sent"] and summary["duplicates"] == 0
    if version == "v1":
        assert summary["sent"] == 30, summary
        return
    assert summary["rejoined_as"] == "backup"
    assert summary["zombie_fenced"] is True, summary
    # And those sent from the kill on (20/s).
    assert summary["sent_during_faults"] > 100, summary
    # Both nodes name the same committing master afterwards.
    assert len(summary["masters_after_rolling"]) == 1, summary
    assert summary["masters_after_rolling"][0] in ("node-a", "node-b"), summary


def _container(image: str, env: dict[str, str]) -> Any:
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # no registry for Ryuk
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image).with_kwargs(network_mode="host")
    for key, value in env.items():
        container = container.with_env(key, value)
    return container


@pytest.mark.timeout(900)
def test_the_kafka_images_sasl_listener(namespace: str, tmp_path: Path) -> None:
    """KAFKA_SASL_PORT/KAFKA_SASL_USERS: a replica (transactions, election) and the client
    deliver through SASL_PLAINTEXT/PLAIN; a wrong password is refused."""
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass (it brings its own broker)")
    if not docker_available():
        pytest.skip("no Docker daemon answers here")
    # The images, as the compose test builds them (Docker's cache: seconds when unchanged).
    subprocess.run(["bash", str(REPO / "docker" / "build.sh")], check=True, timeout=840)
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

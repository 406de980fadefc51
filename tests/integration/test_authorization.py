"""Kafka refusing chronos' credentials ends the node, loudly, instead of retrying for ever;
Kafka refusing one target topic concerns that topic's messages only (its retry policy).

A broker of its own with Apache Kafka's authorizer: everything is allowed except what one ACL
denies the test's (anonymous) principal. Before the seam a refused transactional id counted as
"fenced" and turned into a takeover retried every second for ever, with exit code 0 at the
next SIGTERM.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

# Defined in private modules; confluent_kafka.admin re-exports them only implicitly, which
# strict mypy (no_implicit_reexport) rejects.
from confluent_kafka.admin._acl import (
    AclOperation,
)
from confluent_kafka.admin._resource import ResourceType

from chronos.devstack.acls import AUTHORIZER, allow_again, deny
from chronos.devstack.kafka import KafkaBroker
from chronos.kafka.admin import create_topic
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from tests.integration.harness import Inbox, make_settings, role_of, running_node, wait_until

pytestmark = pytest.mark.kafka_only(reason="ACLs need Apache Kafka's authorizer")

#: From start to the refusal: topic creation, the election's join, one init_transactions.
RUN_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def secured() -> Iterator[str]:
    broker = KafkaBroker(properties=AUTHORIZER).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _run(bootstrap: str, tmp_path: Path, namespace: str, group: str | None) -> str:
    """``chronos run`` until it exits; its stderr (exit code 1 asserted)."""
    config = tmp_path / "chronos.toml"
    section = f'[group]\nname = "{group}"\n' if group else ""
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{bootstrap}"\n[topics]\nnamespace = "{namespace}"\n'
        f'[node]\nnode_id = "a"\ndata_dir = "{tmp_path / "store"}"\n{section}'
    )
    done = subprocess.run(
        [sys.executable, "-m", "chronos.cli.entry", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "node_exit_fatal" in done.stderr
    return done.stderr


def test_a_refused_transactional_id_ends_the_replica(secured: str, tmp_path: Path) -> None:
    deny(secured, ResourceType.TRANSACTIONAL_ID, "acl1.delivery.g", AclOperation.ALL)
    stderr = _run(secured, tmp_path, "acl1", "g")
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in stderr
    assert stderr.count("takeover_started") == 1, "the takeover was retried"


def test_a_refused_election_group_ends_the_replica(secured: str, tmp_path: Path) -> None:
    deny(secured, ResourceType.GROUP, "acl2.election.g", AclOperation.ALL)
    assert "GROUP_AUTHORIZATION_FAILED" in _run(secured, tmp_path, "acl2", "g")


def test_a_refused_inner_topic_ends_a_node_alone(secured: str, tmp_path: Path) -> None:
    deny(secured, ResourceType.TOPIC, "acl3.inner", AclOperation.READ)
    assert "TOPIC_AUTHORIZATION_FAILED" in _run(secured, tmp_path, "acl3", None)


def _allow(bootstrap: str, topic: str) -> None:
    assert allow_again(bootstrap, topic, AclOperation.WRITE), f"no ACL refused writing {topic}"


def _status(port: int, message_id: str) -> dict[str, Any]:
    answer = httpx.get(f"http://127.0.0.1:{port}/v1/messages/{message_id}", timeout=10)
    answer.raise_for_status()
    status: dict[str, Any] = answer.json()
    return status


def _policy_settings(
    bootstrap: str, namespace: str, tmp_path: Path, mode: str, policy: dict[str, Any]
) -> ChronosSettings:
    """A node alone or the one replica of a group, with ``policy`` for ``<namespace>-denied``."""
    sections: dict[str, dict[str, Any]] = {
        "delivery": {"topics": {f"{namespace}-denied": policy}},
        "admin": {"port": 0},
    }
    if mode == "group":
        sections |= {"group": {"name": "g"}, "node": {"ingest_threads": 1}}
    return make_settings(bootstrap, namespace, tmp_path, **sections)


@pytest.mark.parametrize("mode", ["alone", "group"])
def test_a_target_topic_refused_for_a_while_is_delivered_once_allowed(
    secured: str, tmp_path: Path, mode: str
) -> None:
    """Mutants caught: a master not asking Kafka about the topic's rights before its
    transaction (the purged transaction's abort ended the producer, each time: the other
    topic was held back until the refusal ended), the refusal dead-lettered despite the
    policy."""
    namespace = f"acl-retry-{mode}"
    denied, other = f"{namespace}-denied", f"{namespace}-other"
    policy = {"backoff_initial_ms": 200, "backoff_max_ms": 500}
    settings = _policy_settings(secured, namespace, tmp_path, mode, policy)
    with Inbox(settings, [denied, other], partitions=1) as inbox:
        deny(secured, ResourceType.TOPIC, denied, AclOperation.WRITE)
        with running_node(settings) as node, DelayClient(settings) as client:
            if mode == "group":
                wait_until(lambda: role_of(node) == "master", 60, "the replica leads")
            port = node.admin_port
            assert port is not None
            client.send_delay(denied, b"v", delay=0.2, id="x")
            client.send_delay(other, b"v", delay=0.2, id="a")
            assert inbox.wait_for({"a"}, 60), "the refused topic held back another one"

            def tried_twice() -> bool:
                failed = _status(port, "x").get("delivery_attempts")
                return failed is not None and failed["attempts"] >= 2

            wait_until(tried_twice, 60, "two refused attempts in the status")
            _allow(secured, denied)
            assert inbox.wait_for({"x"}, 60), "not delivered once allowed"
            status = _status(port, "x")
            assert status["delivery_attempts"]["last_error"].startswith(
                "TOPIC_AUTHORIZATION_FAILED"
            ), status
            wait_until(lambda: _status(port, "x")["state"] == "delivered", 60, "seek passed")
        assert inbox.count("x") == 1 and inbox.count("a") == 1


@pytest.mark.parametrize(
    ("mode", "refused"),
    [("alone", AclOperation.WRITE), ("group", AclOperation.WRITE), ("group", AclOperation.ALL)],
)
def test_a_maximum_age_dead_letters_a_refused_topic_with_the_reason(
    secured: str, tmp_path: Path, mode: str, refused: AclOperation
) -> None:
    """``ALL``: chronos may not even describe the topic, as without any ACL granting it (the
    rights question itself is refused). Mutant caught: that refusal taken for Kafka not
    answering (the group retried the range as an outage for as long as it lasted)."""
    namespace = f"acl-age-{mode}-{refused.name.lower()}"
    denied, other = f"{namespace}-denied", f"{namespace}-other"
    policy = {"max_age_s": 1, "backoff_initial_ms": 200, "backoff_max_ms": 500}
    settings = _policy_settings(secured, namespace, tmp_path, mode, policy)
    dead = settings.topics.names.dead_letter
    create_topic(settings, denied, 1)
    with Inbox(settings, [other], partitions=1) as inbox:
        deny(secured, ResourceType.TOPIC, denied, refused)
        with running_node(settings) as node, DelayClient(settings) as client:
            if mode == "group":
                wait_until(lambda: role_of(node) == "master", 60, "the replica leads")
            with Inbox(settings, [dead], partitions=1) as dlq:
                client.send_delay(denied, b"v", delay=0.2, id="x")
                client.send_delay(other, b"v", delay=0.2, id="a")
                assert inbox.wait_for({"a"}, 60), "the refused topic held back another one"
                assert dlq.wait_for({"x"}, 60), "never dead-lettered"
                headers = dict(dlq.first("x").headers)
                reason = (headers.get("chronos-dlq-reason") or b"").decode()
                assert "(max_age_s 1): TOPIC_AUTHORIZATION_FAILED" in reason, reason
                assert headers.get("chronos-dlq-target") == denied.encode()
                client.send_delay(other, b"v", delay=0.2, id="b")
                assert inbox.wait_for({"b"}, 60)
                assert dlq.count("x") == 1

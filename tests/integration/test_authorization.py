"""Kafka refusing chronos' credentials ends the node, loudly, instead of retrying for ever.

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

import pytest
from confluent_kafka.admin import AdminClient

# Defined in private modules; confluent_kafka.admin re-exports them only implicitly, which
# strict mypy (no_implicit_reexport) rejects.
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from chronos.devstack.kafka import KafkaBroker

pytestmark = pytest.mark.kafka_only(reason="ACLs need Apache Kafka's authorizer")

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # Only what an ACL denies is refused: the broker's own requests and the rest of the test.
    "allow.everyone.if.no.acl.found": "true",
}
#: From start to the refusal: topic creation, the election's join, one init_transactions.
RUN_TIMEOUT_S = 90


@pytest.fixture(scope="module")
def secured() -> Iterator[str]:
    broker = KafkaBroker(properties=AUTHORIZER).start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _deny(bootstrap: str, kind: ResourceType, name: str, operation: AclOperation) -> None:
    """Refuse ``operation`` on one resource, and allow the rest of it: with an ACL on it, a
    resource is no longer covered by ``allow.everyone.if.no.acl.found``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    acls = [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            op,
            permission,
        )
        for op, permission in (
            (AclOperation.ALL, AclPermissionType.ALLOW),
            (operation, AclPermissionType.DENY),  # a DENY wins over any ALLOW
        )
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)


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
    _deny(secured, ResourceType.TRANSACTIONAL_ID, "acl1.delivery.g", AclOperation.ALL)
    stderr = _run(secured, tmp_path, "acl1", "g")
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in stderr
    assert stderr.count("takeover_started") == 1, "the takeover was retried"


def test_a_refused_election_group_ends_the_replica(secured: str, tmp_path: Path) -> None:
    _deny(secured, ResourceType.GROUP, "acl2.election.g", AclOperation.ALL)
    assert "GROUP_AUTHORIZATION_FAILED" in _run(secured, tmp_path, "acl2", "g")


def test_a_refused_inner_topic_ends_a_node_alone(secured: str, tmp_path: Path) -> None:
    _deny(secured, ResourceType.TOPIC, "acl3.inner", AclOperation.READ)
    assert "TOPIC_AUTHORIZATION_FAILED" in _run(secured, tmp_path, "acl3", None)

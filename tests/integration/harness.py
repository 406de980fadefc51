"""Helpers to run a real node (and proxy) against the session broker and watch deliveries."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from chronos.devstack.watch import Delivered, DeliveryWatcher
from chronos.group.replica import Replica
from chronos.kafka.admin import create_topic
from chronos.kafka.partitioner import partition_of
from chronos.runtime.node import Node
from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from tests.waiting import wait_until as wait_until  # the integration tests import it here

#: The inner partitions of every test's settings (``make_settings``).
INNER_PARTITIONS = 4


def make_settings(
    bootstrap: str, namespace: str, data_dir: Path, **sections: dict[str, Any]
) -> ChronosSettings:
    """Settings for one test: its own topic namespace, store and node id; sections override."""
    base: dict[str, dict[str, Any]] = {
        "kafka": {"bootstrap_servers": bootstrap},
        "topics": {"namespace": namespace, "inner_partitions": INNER_PARTITIONS},
        "node": {"node_id": "n1", "data_dir": data_dir, "ingest_threads": 2},
        "proxy": {"port": 0, "ack_timeout_s": 15},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return ChronosSettings.model_validate(base)


@contextmanager
def running_node(settings: ChronosSettings) -> Iterator[Node]:
    """A started, caught-up node; stopped (drained) on exit."""
    node = Node(settings)
    node.start()
    try:
        assert node.wait_ready(60), "node did not catch up with the inner topic"
        yield node
    finally:
        node.stop()


GROUP = "g"


def group_settings(
    bootstrap: str, namespace: str, tmp_path: Path, name: str, **sections: dict[str, Any]
) -> ChronosSettings:
    """Settings of replica ``name`` of the test group ``GROUP``."""
    return make_settings(
        bootstrap,
        namespace,
        tmp_path / name,
        node={"node_id": name, "data_dir": tmp_path / name, "ingest_threads": 1},
        group={"name": GROUP},
        **sections,
    )


def role_of(node: Node) -> str:
    replica = node.replica
    assert isinstance(replica, Replica)
    return replica.role


class Group:
    """Nodes of one group, started in order; each stopped once at the end.

    Parameters:
        sections: settings sections every node of the group gets (on top of the defaults).
    """

    def __init__(
        self, bootstrap: str, namespace: str, tmp_path: Path, **sections: dict[str, Any]
    ) -> None:
        self.bootstrap, self.namespace, self.tmp_path = bootstrap, namespace, tmp_path
        self.sections = sections
        self.nodes: dict[str, Node] = {}

    def settings(self, name: str) -> ChronosSettings:
        return group_settings(self.bootstrap, self.namespace, self.tmp_path, name, **self.sections)

    def start(self, name: str) -> Node:
        node = Node(self.settings(name))
        node.start()
        self.nodes[name] = node
        return node

    def masters(self) -> list[str]:
        return [n for n, node in self.nodes.items() if role_of(node) == "master"]

    def stop_all(self) -> None:
        for node in self.nodes.values():
            node.stop()


class Inbox:
    """Everything delivered to some target topics, by message id."""

    def __init__(self, settings: ChronosSettings, topics: list[str], partitions: int = 2) -> None:
        for topic in topics:
            create_topic(settings, topic, partitions)
        self._lock = threading.Lock()
        self.by_id: dict[str, list[Delivered]] = {}
        self._watcher = DeliveryWatcher(settings.kafka.bootstrap_servers, topics, self._add)

    def _add(self, delivered: Delivered) -> None:
        with self._lock:
            self.by_id.setdefault(delivered.id, []).append(delivered)

    def __enter__(self) -> Inbox:
        self._watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._watcher.stop()

    def wait_for(self, ids: set[str], timeout_s: float = 60.0) -> bool:
        """True once every id in ``ids`` was delivered at least once."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if ids <= self.by_id.keys():
                    return True
            time.sleep(0.05)
        return False

    def count(self, message_id: str) -> int:
        with self._lock:
            return len(self.by_id.get(message_id, []))

    def first(self, message_id: str) -> Delivered:
        with self._lock:
            return self.by_id[message_id][0]

    def occurrences(self, message_id: str) -> list[Delivered]:
        """Every delivery of a repeat ``message_id`` so far, by occurrence."""
        with self._lock:
            return sorted(self.by_id.get(message_id, []), key=lambda d: d.occurrence)

    def wait_occurrence(self, message_id: str, occurrence: int, timeout_s: float) -> None:
        """Until occurrence ``occurrence`` (or a later one) of ``message_id`` arrived."""
        wait_until(
            lambda: any(d.occurrence >= occurrence for d in self.occurrences(message_id)),
            timeout_s,
            f"{message_id}: occurrence {occurrence} arrived",
        )

    def settle(
        self,
        client: DelayClient,
        topic: str,
        partitions: int,
        deliver_at_ms: int | None = None,
        prefix: str = "marker-",
        timeout_s: float = 60.0,
    ) -> set[str]:
        """Wait for a positive signal instead of a sleep before asserting that nothing more
        came: markers on every one of the ``partitions`` inner partitions, due at
        ``deliver_at_ms`` (None: at once), delivered. A node delivers in slot order, so what
        was due before them (a duplicate, an occurrence too many) went out before them.
        Returns the markers' ids."""
        markers = ids_per_partition(f"{prefix}{time.time_ns()}-", partitions, 1)
        if deliver_at_ms is None:
            sent = {client.send_delay(topic, b"marker", id=i, delay=0).id for i in markers}
        else:
            sent = {
                client.send_delay(topic, b"marker", id=i, deliver_at=deliver_at_ms).id
                for i in markers
            }
        assert self.wait_for(sent, timeout_s), "the markers sent last were not delivered"
        return sent


def ids_per_partition(prefix: str, partitions: int, per_partition: int) -> list[str]:
    """Ids that land ``per_partition`` on each of ``partitions`` inner partitions."""
    by_partition: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(ids) < per_partition for ids in by_partition.values()):
        candidate = f"{prefix}{n}"
        n += 1
        chosen = by_partition[partition_of(candidate.encode(), partitions)]
        if len(chosen) < per_partition:
            chosen.append(candidate)
    return [i for ids in by_partition.values() for i in ids]


def send_ids(client: DelayClient, topic: str, ids: list[str], delay_s: float) -> set[str]:
    """One message per id, each due in ``delay_s``; returns the ids acknowledged."""
    return {client.send_delay(topic, i, delay=delay_s, id=i).id for i in ids}


def exactly_once_after_markers(
    inbox: Inbox, client: DelayClient, topic: str, ids: set[str], marker_prefix: str
) -> None:
    """Every id delivered once and never early. Duplicates of ``ids`` would come before
    markers sent after them to every inner partition: those are waited for, not a sleep."""
    assert inbox.wait_for(ids, 60), f"missing: {sorted(ids - inbox.by_id.keys())[:5]}"
    markers = ids_per_partition(marker_prefix, INNER_PARTITIONS, 2)
    sent = send_ids(client, topic, markers, 0.2)
    assert inbox.wait_for(sent, 60), "markers after the checked ids were not delivered"
    twice = sorted(i for i in ids | sent if inbox.count(i) > 1)
    assert not twice, f"delivered more than once: {twice[:5]}"
    early = [i for i in ids if inbox.first(i).produced_ms < inbox.first(i).due_ms]
    assert not early, f"delivered early: {early[:5]}"


def admin_api_answers_for_the_cluster(
    ports: dict[str, int | None], asked: str, delivered: set[str], partitions: int
) -> None:
    """Each node's admin API answers for the whole cluster (either cluster shape): every node
    ready, delivering its share; a status asked of ``asked`` is answered by the node that
    delivered the id (its outcome recorded: a standby has none), a listing and a forecast
    cover every partition, and ``/metrics`` has series per partition."""
    share = partitions // len(ports)
    for name, port in ports.items():
        assert port is not None, f"{name} serves no admin API"
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready["ok"] and ready["role"] == "cluster" and len(ready["delivers"]) == share, ready
    with httpx.Client(base_url=f"http://127.0.0.1:{ports[asked]}", timeout=10) as http:
        seen = set()
        for message_id in sorted(delivered):
            answer = http.get(f"/v1/messages/{message_id}").json()
            assert answer["state"] == "delivered" and answer["outcome_recorded"], answer
            seen.add(answer["inner_partition"])
        assert seen == set(range(partitions))
        listing = http.get("/v1/messages", params={"state": "delivered", "limit": 1000}).json()
        assert delivered <= {row["id"] for row in listing["rows"]}
        assert listing["missing"] == [] and listing["partitions"] == list(range(partitions))
        forecast = http.get("/v1/forecast").json()
        assert forecast["partitions"] == list(range(partitions)), forecast
        scraped = http.get("/metrics").text
        for partition in range(partitions):
            assert f'chronos_partition_stored_messages{{partition="{partition}"}}' in scraped

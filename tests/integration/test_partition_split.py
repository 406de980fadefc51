"""Nodes that split the inner partitions (``node.owned_partitions``) deliver each message once."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from chronos.cli.main import main as cli_main
from chronos.errors import ConfigError
from chronos.kafka.admin import ensure_topics
from chronos.runtime.node import Node
from chronos.settings import ChronosSettings
from proxy.client import DelayClient, DelayRequest
from tests.integration.harness import Inbox, make_settings, running_node


def test_two_nodes_splitting_the_partitions_deliver_everything_once(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    halves = ([0, 1], [2, 3])  # the harness' inner topic has 4 partitions
    settings = [
        make_settings(
            kafka_bootstrap,
            namespace,
            tmp_path / f"store-{i}",
            node={"node_id": f"n{i}", "owned_partitions": owned, "ingest_threads": 1},
            # Random ids, so that one batch reaches both halves (a made-up id sticks to one
            # partition for proxy.sticky_ids_ms: a batch sent within it would reach one).
            proxy={"sticky_ids_ms": 0},
        )
        for i, owned in enumerate(halves)
    ]
    topic = f"{namespace}-split"
    with ExitStack() as stack:
        nodes = [stack.enter_context(running_node(s)) for s in settings]
        inbox = stack.enter_context(Inbox(settings[0], [topic]))
        client = stack.enter_context(DelayClient(settings[0]))
        kept = {
            r.id
            for r in client.send_batch(
                [DelayRequest(topic, f"m{i}", delay=0.5) for i in range(200)]
            )
        }
        # Cancels travel to the partition of their add, so the node that holds it.
        doomed = client.send_batch([DelayRequest(topic, f"c{i}", delay=3.0) for i in range(40)])
        assert len(client.cancel_batch([r.id for r in doomed])) == 40
        # Due after the cancelled ones: a node delivers in key order, so once both nodes
        # delivered some of these, each has passed every cancelled message.
        later = {
            r.id
            for r in client.send_batch([DelayRequest(topic, f"l{i}", delay=3.5) for i in range(20)])
        }
        assert inbox.wait_for(kept | later, timeout_s=60)
        deadline = time.monotonic() + 60  # a delivery counts once its node's seek passed it
        while True:
            delivered = [n.context.metrics.totals().get("delivered", 0) for n in nodes if n.context]
            if sum(delivered) >= 220 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        cancelled = [n.context.metrics.totals().get("cancelled", 0) for n in nodes if n.context]
    assert inbox.by_id.keys() == kept | later
    assert max(inbox.count(i) for i in kept | later) == 1
    assert sum(delivered) == 220 and min(delivered) > 0, delivered
    assert sum(cancelled) == 40 and min(cancelled) > 0, cancelled


def test_a_node_owning_a_partition_the_topic_lacks_does_not_start(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    settings = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", node={"owned_partitions": [1, 4]}
    )
    _assert_refused(settings, r"owned_partitions \[4\] do not exist")


def test_a_store_filled_from_more_partitions_than_the_node_owns_is_refused(
    kafka_bootstrap: str, namespace: str, tmp_path: Path
) -> None:
    # Random ids (proxy.sticky_ids_ms 0): one batch of made-up ids would stick to one partition.
    whole = make_settings(
        kafka_bootstrap, namespace, tmp_path / "store", proxy={"sticky_ids_ms": 0}
    )
    topic = f"{namespace}-moved"
    with running_node(whole) as node, DelayClient(whole) as client:
        # Ids spread over the 4 partitions; far in the future, so they stay pending.
        client.send_batch([DelayRequest(topic, f"m{i}", delay=3600) for i in range(64)])
        deadline = time.monotonic() + 60
        while node.context and node.context.metrics.totals().get("ingested", 0) < 64:
            assert time.monotonic() < deadline, "the node did not ingest the requests"
            time.sleep(0.05)
    half = whole.model_copy(
        update={"node": whole.node.model_copy(update={"owned_partitions": [0, 1]})}
    )
    _assert_refused(half, r"holds inner partitions \[2, 3\]")


def _assert_refused(settings: ChronosSettings, reason: str) -> None:
    """The node does not start, for ``reason``; what it opened is closed again."""
    node = Node(settings)
    try:
        with pytest.raises(ConfigError, match=reason):
            node.start()
    finally:
        node.stop()


def test_check_names_the_partitions_a_node_reads_and_refuses_missing_ones(
    kafka_bootstrap: str, namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ensure_topics(make_settings(kafka_bootstrap, namespace, tmp_path / "store"))

    def check(owned: list[int]) -> int:
        config = tmp_path / "chronos.toml"
        config.write_text(
            f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n'
            f'[topics]\nnamespace = "{namespace}"\n[node]\nowned_partitions = {owned}\n'
        )
        return cli_main(["check", "--config", str(config)])

    assert check([3, 1]) == 0
    assert f"{namespace}.inner: 4 partitions, this node reads [1, 3]" in capsys.readouterr().out
    assert check([1, 7]) == 2
    assert "owned_partitions [7] do not exist" in capsys.readouterr().err

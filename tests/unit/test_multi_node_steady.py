"""scripts/multi_node_steady.py gives each extra node a config of its own on the same topics."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from chronos.settings import load_settings
from tests.scripts import load_script


def test_an_extra_node_shares_the_topics_and_owns_its_partitions(tmp_path: Path) -> None:
    stack = SimpleNamespace(
        workdir=tmp_path,
        bootstrap="127.0.0.1:9999",
        namespace="bench1234",
        layout=SimpleNamespace(inner=4),
    )
    node_config = load_script("multi_node_steady")._node_config
    first = load_settings(node_config(stack, 1, [0, 1]))
    second = load_settings(node_config(stack, 2, [2, 3]))
    assert second.kafka.bootstrap_servers == "127.0.0.1:9999"
    assert second.topics.names.inner == first.topics.names.inner
    assert second.topics.inner_partitions == 4
    assert (first.node.owned_partitions, second.node.owned_partitions) == ([0, 1], [2, 3])
    assert (first.node.node_id, second.node.node_id) == ("bench-node-1", "bench-node-2")
    assert second.node.data_dir == tmp_path / "store-2"

"""scripts/multi_node_steady.py gives each extra node a config of its own on the same topics."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

from chronos.settings import load_settings

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "multi_node_steady.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multi_node_steady", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_extra_node_shares_the_topics_and_owns_its_partitions(tmp_path: Path) -> None:
    stack = SimpleNamespace(
        workdir=tmp_path,
        bootstrap="127.0.0.1:9999",
        namespace="bench1234",
        layout=SimpleNamespace(inner=4),
    )
    settings = load_settings(_load()._node_config(stack, 2, [2, 3]))
    assert settings.kafka.bootstrap_servers == "127.0.0.1:9999"
    assert (
        settings.topics.names.inner
        == load_settings(_load()._node_config(stack, 1, [0, 1])).topics.names.inner
    )
    assert settings.topics.inner_partitions == 4
    assert settings.node.owned_partitions == [2, 3]
    assert settings.node.node_id == "bench-node-2"
    assert settings.node.data_dir == tmp_path / "store-2"

"""Dependencies point one way: the package layout is checked, not only described.

``node/`` (a node's components and the at-least-once engine) and ``group/`` (replica groups)
never import each other; ``runtime/`` is the only package that knows both, and ``cluster/``
(partitions placed over nodes) builds on it and on ``group/``. The layers below
them (``schedule/``, ``delivery/``, ``kafka/``, ``store/``) import neither, nor does ``admin/``
(the HTTP surface, which reads a node through a Protocol). And every Kafka
client of the runtime is built in ``chronos/kafka/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHRONOS = ROOT / "chronos"

#: package -> chronos packages it must never import (lazy imports inside functions count).
FORBIDDEN: dict[str, set[str]] = {
    "node": {"group", "runtime", "cluster", "cli", "bench", "devstack"},
    "group": {"node", "runtime", "cluster", "cli", "bench", "devstack"},
    # A cluster runs replica nodes (runtime/) and knows nothing of a node's components.
    "cluster": {"node", "cli", "bench", "devstack"},
    "runtime": {"cluster", "cli", "bench"},
    "schedule": {"node", "group", "runtime", "cluster", "delivery", "kafka", "cli"},
    "delivery": {"node", "group", "runtime", "cluster", "cli"},
    "kafka": {"node", "group", "runtime", "cluster", "schedule", "delivery", "cli"},
    "store": {"node", "group", "runtime", "cluster", "schedule", "delivery", "kafka", "cli"},
    # Spark jobs build on the settings and the shared model, never on the command line.
    "pipeline": {"node", "group", "runtime", "cluster", "cli", "bench", "devstack", "admin"},
    # The admin API reads a node through a Protocol (admin/view.py); runtime/ answers it.
    "admin": {
        "node",
        "group",
        "runtime",
        "cluster",
        "schedule",
        "delivery",
        "kafka",
        "store",
        "cli",
    },
}

#: Where confluent-kafka clients may be constructed: the one factory, and the local tools
#: (benchmark load generators and observers, test brokers) that stand in for users.
CLIENT_BUILDERS = {"kafka", "devstack", "bench"}
CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient"}


def _modules(package: str) -> list[Path]:
    return sorted((CHRONOS / package).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Every ``chronos.<package>`` a module imports, at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "chronos" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_above_or_beside_it(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)} imports chronos.{target}"
        for path in _modules(package)
        for target in _imported(path) & FORBIDDEN[package]
    }
    assert not wrong, sorted(wrong)


def test_only_the_wiring_knows_both_node_and_group() -> None:
    knowing_both = sorted(
        str(path.relative_to(ROOT))
        for path in [*CHRONOS.rglob("*.py"), *(ROOT / "proxy").rglob("*.py")]
        if {"node", "group"} <= _imported(path)
    )
    assert knowing_both and all(p.startswith("chronos/runtime/") for p in knowing_both), (
        knowing_both
    )


def _constructs_clients(path: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in CLIENT_CLASSES:
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}(...)")
    return calls


def test_every_runtime_kafka_client_is_built_by_the_one_factory() -> None:
    paths = [
        path
        for path in CHRONOS.rglob("*.py")
        if path.relative_to(CHRONOS).parts[0] not in CLIENT_BUILDERS
    ] + list((ROOT / "proxy").rglob("*.py"))
    raw = [call for path in paths for call in _constructs_clients(path)]
    assert not raw, raw


#: Most parameters a constructor may take by position (besides ``self``).
POSITIONAL_MAX = 6


def test_wide_constructors_take_their_arguments_by_keyword() -> None:
    """A component wired from many parts is built with names, not positions: two arguments of
    one type swapped (two clocks, two callables) would otherwise pass every type check."""
    wide = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(CHRONOS.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
        and node.name == "__init__"
        and len(node.args.posonlyargs) + len(node.args.args) - 1 > POSITIONAL_MAX
    ]
    assert not wide, f"constructors taking more than {POSITIONAL_MAX} arguments by position: {wide}"

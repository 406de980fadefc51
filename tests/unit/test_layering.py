"""Dependencies point one way: the package layout is checked, not only described.

``node/`` (a node's components and the at-least-once engine) and ``group/`` (replica groups)
never import each other; ``runtime/`` is the only package that knows both and wires nodes from
them and from ``cluster/`` (partitions placed over nodes, built on ``group/``). The layers
below them (``schedule/``, ``delivery/``, ``kafka/``, ``store/``) import neither, nor does
``admin/`` (the HTTP surface, which reads a node through a Protocol). ``web/`` (what the proxy
and the admin API share) builds on the top-level modules alone; ``proxy/`` (the front door) on
``web/``, ``kafka/`` and the shared model, never on a node. The tools stand outside a node:
``devstack/`` (local brokers and node processes) builds on the top-level modules alone,
``bench/`` on ``devstack/``, ``kafka/`` and ``proxy/``; only ``cli/`` (the commands, the top)
may import everything, and nothing imports it. And every Kafka client of the runtime is built
in ``chronos/kafka/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHRONOS = ROOT / "chronos"

#: A node's packages and the tools above them: what the packages beside a node never import.
_NODE = {"node", "group", "runtime", "cluster", "cli", "bench", "devstack"}

#: package -> packages it must never import (lazy imports inside functions count); ``proxy``
#: is the top-level package beside ``chronos``, the rest are ``chronos``'s.
FORBIDDEN: dict[str, set[str]] = {
    "node": {"group", "runtime", "cluster", "cli", "bench", "devstack"},
    "group": {"node", "runtime", "cluster", "cli", "bench", "devstack"},
    # A cluster's parts (membership, placement, claims' rounds) know nothing of a node's
    # components nor of how a node is wired: runtime/ wires a member of the node shape from
    # them (runtime/member.py) and the partition shape's runtime Node per partition
    # (runtime/shard.py, runtime/cluster_node.py).
    "cluster": {"node", "runtime", "cli", "bench", "devstack"},
    "runtime": {"cli", "bench"},
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
    # Calendar arithmetic beneath the shared model (repeat.py, validation.py): pure.
    "cron": _NODE | {"schedule", "delivery", "kafka", "store", "admin", "web", "pipeline", "proxy"},
    # Tokens, the guard, quotas: shared by the proxy and the admin API, beneath both.
    "web": _NODE | {"schedule", "delivery", "kafka", "store", "admin", "pipeline", "proxy"},
    # The front door validates and produces; it never reads a store or runs a node.
    "proxy": _NODE | {"schedule", "store", "admin", "pipeline"},
    # Tools that start brokers and node processes from outside, as a user would.
    "devstack": _NODE - {"devstack"}
    | {"schedule", "delivery", "store", "admin", "web", "pipeline", "proxy"},
    "bench": _NODE - {"bench", "devstack"}
    | {"schedule", "delivery", "store", "admin", "web", "pipeline"},
}

#: Where confluent-kafka clients may be constructed: the one factory, and the local tools
#: (benchmark load generators and observers, test brokers) that stand in for users.
CLIENT_BUILDERS = {"kafka", "devstack", "bench"}
CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient"}


def _modules(package: str) -> list[Path]:
    root = ROOT / "proxy" if package == "proxy" else CHRONOS / package
    return sorted(root.rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Every ``chronos.<package>`` (and ``proxy``) a module imports, at any depth."""
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
            elif parts[0] == "proxy":
                found.add("proxy")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_imports_nothing_above_or_beside_it(package: str) -> None:
    wrong = {
        f"{path.relative_to(ROOT)} imports chronos.{target}"
        for path in _modules(package)
        for target in _imported(path) & FORBIDDEN[package]
    }
    assert not wrong, sorted(wrong)


def test_every_package_has_its_rule() -> None:
    """A new package is placed in the layers when it is added, not found beside them later."""
    packages = {p.name for p in CHRONOS.iterdir() if (p / "__init__.py").is_file()}
    assert packages - {"cli"} <= set(FORBIDDEN), sorted(packages - {"cli"} - set(FORBIDDEN))


def test_nothing_imports_the_commands() -> None:
    """``cli/`` is the top: a package that imported it would load the command line's choices."""
    users = sorted(
        str(path.relative_to(ROOT))
        for path in [*CHRONOS.rglob("*.py"), *(ROOT / "proxy").rglob("*.py")]
        if "cli" in _imported(path) and not path.is_relative_to(CHRONOS / "cli")
    )
    assert not users, users


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _run_time_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports when it runs: at the top or inside a
    function, not under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & modules - {_module_name(path)}


def test_no_two_modules_import_each_other_at_run_time() -> None:
    """Issue 60: ``kafka/clients.py`` and the publishers imported each other (inside
    functions); a cycle makes the order of imports matter and hides which module is the lower
    one. Typing-only imports (``if TYPE_CHECKING:``) do not count."""
    paths = [*CHRONOS.rglob("*.py"), *(ROOT / "proxy").rglob("*.py")]
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _run_time_imports(path, modules) for path in paths}
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycles.append(trail[trail.index(module) :] + [module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not cycles, [" -> ".join(cycle) for cycle in cycles]


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

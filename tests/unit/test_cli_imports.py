"""Subcommands import what they use only: ``chronos --help`` builds every parser without the
heavy libraries, and ``chronos run`` loads neither the HTTP stack nor the bench tools.

Checked by module (what is loaded), not by time: the start-up times themselves are measured
in the closing notes, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(*modules: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


HEAVY_FOR_HELP = [
    "pydantic", "confluent_kafka", "rocksdict", "structlog", "fastapi", "pyspark", "croniter",
]  # fmt: skip
#: ``chronos.devstack`` itself only names the broker kinds (for ``--broker`` choices); its
#: modules start brokers.
NOT_FOR_A_NODE = ["fastapi", "uvicorn", "starlette", "chronos.bench", "chronos.devstack.", "proxy"]


@pytest.mark.parametrize("module", HEAVY_FOR_HELP)
def test_help_builds_every_parser_without_heavy_libraries(module: str) -> None:
    loaded = _loaded("chronos.cli.main")
    assert not {m for m in loaded if m == module or m.startswith(module + ".")}


@pytest.mark.parametrize("module", NOT_FOR_A_NODE)
def test_a_node_loads_neither_the_http_stack_nor_the_tools(module: str) -> None:
    loaded = _loaded("chronos.cli.main", "chronos.cli.run", "chronos.logs", "chronos.runtime.node")
    assert "chronos.runtime.node" in loaded
    prefix = module if module.endswith(".") else module + "."
    assert not {m for m in loaded if m == module or m.startswith(prefix)}

"""docs/openapi.json is the spec the HTTP proxy serves (regenerate: scripts/export_openapi.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chronos.errors import ValidationError
from chronos.settings import ChronosSettings
from chronos.validation import validate_id, validate_topic
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_committed_spec_matches_the_app() -> None:
    module = load_script("export_openapi")
    generated = json.loads(module.spec())
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == generated, "docs/openapi.json is stale: run scripts/export_openapi.py"
    assert set(generated["paths"]) == {
        "/v1/messages",
        "/v1/messages/batch",
        "/v1/messages/{message_id}",
        "/v1/messages/{message_id}/reschedule",
        "/v1/policies/{topic}",
        "/healthz",
    }


_SAMPLES = [
    "orders", "orders.timeout", "a-b_c:d", ".", "..", "...", "__consumer_offsets", "_x",
    "chronos.inner", "chronos", "chronosx.y", "has space", "", "ü", "a/b", "x" * 128, "x" * 129,
    "x" * 249, "x" * 250,
]  # fmt: skip


def _refused(check: Any, value: str) -> bool:
    try:
        check(value)
    except ValidationError:
        return True
    return False


def test_the_schema_patterns_accept_what_the_server_accepts() -> None:
    """Mutant caught: a schema pattern drifting from chronos/validation.py (the fuzz test would
    see it only on a broker, and only for the strings it happens to generate)."""
    settings = ChronosSettings()
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    fields = spec["components"]["schemas"]["ScheduleIn"]["properties"]
    topic = fields["topic"]
    ident = next(b for b in fields["id"]["anyOf"] if b.get("type") == "string")
    names = settings.topics.names
    for value in _SAMPLES:
        by_schema = bool(re.search(topic["pattern"], value)) and len(value) >= topic["minLength"]
        assert by_schema == (not _refused(lambda v: validate_topic(v, names), value)), value
        by_schema = bool(re.search(ident["pattern"], value)) and len(value) <= ident["maxLength"]
        assert by_schema == (not _refused(lambda v: validate_id(v, settings.limits), value)), value
    # A policy's topic: a target topic's rules, or "*".
    (parameter,) = spec["paths"]["/v1/policies/{topic}"]["put"]["parameters"]
    policy_topic = parameter["schema"]
    for value in [*_SAMPLES, "*", "**", "orders*"]:
        by_schema = bool(re.search(policy_topic["pattern"], value)) and len(value) >= 1
        server = value == "*" or not _refused(lambda v: validate_topic(v, names), value)
        assert by_schema == server, value


def _not_json_schema(node: object, path: str = "") -> list[str]:
    """Paths of pydantic's constraint names (``ge``, ``le``, ``gt``, ``lt``) left in a schema:
    JSON Schema says ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("ge", "le", "gt", "lt"):
                found.append(f"{path}/{key}")
            found += _not_json_schema(value, f"{path}/{key}")
    elif isinstance(node, list):
        for n, value in enumerate(node):
            found += _not_json_schema(value, f"{path}/{n}")
    return found


def test_every_bound_is_written_as_json_schema_says() -> None:
    """Issue 62: a policy's burst, backoffs and attempts were bounded with ``ge``/``le``, which
    no generated client reads (schemathesis took ``{"burst": 0}`` for a valid request)."""
    spec = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert _not_json_schema(spec) == []
    burst = spec["components"]["schemas"]["PolicyIn"]["properties"]["burst"]["anyOf"][0]
    assert (burst["minimum"], burst["maximum"]) == (1, 1_000_000)

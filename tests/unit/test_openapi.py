"""docs/openapi.json is the spec the HTTP proxy serves (regenerate: scripts/export_openapi.py)."""

from __future__ import annotations

import json
from pathlib import Path

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
        "/healthz",
    }

#!/usr/bin/env python3
"""Write the HTTP proxy's OpenAPI spec to docs/openapi.json (a unit test keeps it current)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from chronos.settings import ChronosSettings
from proxy.client import DelayClient
from proxy.http.app import create_app

TARGET = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def spec() -> str:
    """The spec as stable, indented JSON (building the app does not connect to Kafka)."""
    settings = ChronosSettings()
    return (
        json.dumps(create_app(DelayClient(settings), settings).openapi(), indent=2, sort_keys=True)
        + "\n"
    )


if __name__ == "__main__":
    TARGET.write_text(spec())
    print(f"wrote {TARGET}", file=sys.stderr)

"""scripts/store_ingest_bench.py keeps working (the numbers come from full runs, not from here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "store_ingest_bench.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("store_ingest_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reports_every_tenth_and_reopens_the_store(tmp_path: Path) -> None:
    result = _load().run(4_000, tmp_path / "store")
    tenths = result["tenths"]
    assert [row["applied"] for row in tenths] == list(range(400, 4_001, 400))
    assert all(row["rate"] > 0 for row in tenths)
    assert result["pending"] == 4_000
    assert result["disk_bytes_per_message"] > 0
    assert result["reopen_to_first_key_s"] is not None

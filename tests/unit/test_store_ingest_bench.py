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


def test_every_add_lands_and_each_tenth_is_reported(tmp_path: Path) -> None:
    result = _load().run(4_000, tmp_path / "store")
    assert (result["added"], result["duplicates"]) == (4_000, 0)
    tenths = result["tenths"]
    assert [row["applied"] for row in tenths] == list(range(400, 4_001, 400))
    assert all(row["rate"] > 0 and row["lookup_us"] > 0 for row in tenths)
    assert result["disk_bytes_per_message"] > 0


def test_a_remainder_joins_the_last_tenth(tmp_path: Path) -> None:
    result = _load().run(4_100, tmp_path / "store")  # tenth 400, then 500
    assert [row["applied"] for row in result["tenths"]][-2:] == [3_600, 4_100]
    assert result["added"] == 4_100

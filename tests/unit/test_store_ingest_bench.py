"""scripts/store_ingest_bench.py keeps working (the numbers come from full runs, not from here)."""

from __future__ import annotations

from pathlib import Path

from chronos.settings import NodeSettings
from tests.scripts import load_script

# The script writes in batches of node.ingest_batch_max, and tenths are whole batches.
BATCH = NodeSettings().ingest_batch_max


def test_every_add_lands_and_each_tenth_is_reported(tmp_path: Path) -> None:
    result = load_script("store_ingest_bench").run(20 * BATCH, tmp_path / "store")
    assert (result["added"], result["duplicates"]) == (20 * BATCH, 0)
    tenths = result["tenths"]
    assert [row["applied"] for row in tenths] == list(range(2 * BATCH, 20 * BATCH + 1, 2 * BATCH))
    assert all(row["rate"] > 0 and row["lookup_us"] > 0 for row in tenths)
    assert result["disk_bytes_per_message"] > 0


def test_a_remainder_joins_the_last_tenth(tmp_path: Path) -> None:
    count = 20 * BATCH + BATCH // 2  # tenths of 2 batches, then the last one half a batch longer
    result = load_script("store_ingest_bench").run(count, tmp_path / "store")
    assert [row["applied"] for row in result["tenths"]][-2:] == [18 * BATCH, count]
    assert result["added"] == count


def test_the_memtable_size_can_be_chosen(tmp_path: Path) -> None:
    result = load_script("store_ingest_bench").run(2 * BATCH, tmp_path / "store", 4)
    assert (result["write_buffer_mb"], result["added"]) == (4, 2 * BATCH)
    assert "write_buffer_size: 4194304" in (tmp_path / "store" / "LOG").read_text()

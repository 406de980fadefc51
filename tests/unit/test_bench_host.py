"""chronos.bench.host: memory fields and folder sizes."""

from __future__ import annotations

from pathlib import Path

from chronos.bench.host import dir_bytes, meminfo_bytes

MEMINFO = """MemTotal:       24684144 kB
MemFree:        20000000 kB
MemAvailable:   23456000 kB
"""


def test_meminfo_fields_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    assert meminfo_bytes("MemTotal", path) == 24684144 * 1024
    assert meminfo_bytes("MemAvailable", path) == 23456000 * 1024
    assert meminfo_bytes("Mem", path) is None  # a prefix of a field is not the field
    assert meminfo_bytes("MemTotal", tmp_path / "missing") is None


def test_dir_bytes_counts_nested_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"12345")
    (tmp_path / "y").write_bytes(b"123")
    assert dir_bytes(tmp_path) == 8

"""A member started where the partition shape kept its stores says they are left, unread."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from chronos.runtime.member import _note_partition_shape_stores


def test_the_partition_shapes_stores_are_named_and_nothing_else(tmp_path: Path) -> None:
    for name in ("p0", "p12", "node", "p1x", "lost+found"):
        (tmp_path / name).mkdir()
    (tmp_path / "p3").write_text("a file, not a store")
    with capture_logs() as logs:
        _note_partition_shape_stores(tmp_path)
    assert [(e["event"], e["stores"]) for e in logs] == [
        ("partition_shape_stores_left", ["p0", "p12"])
    ]
    with capture_logs() as quiet:
        _note_partition_shape_stores(tmp_path / "node")
    assert quiet == []

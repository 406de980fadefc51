"""A member started where the partition shape kept its stores says they are left, unread."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from chronos.logs import configure_logging
from chronos.runtime import member
from chronos.settings import LogSettings


def test_the_partition_shapes_stores_are_named_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("p0", "p12", "node", "p1x", "lost+found"):
        (tmp_path / name).mkdir()
    (tmp_path / "p3").write_text("a file, not a store")
    # A logger first used by an earlier test keeps that test's set-up
    # (cache_logger_on_first_use): info level again, and a fresh logger.
    configure_logging(LogSettings())
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(member, "log", structlog.get_logger(member.__name__))
        assert member._note_partition_shape_stores(tmp_path) == ["p0", "p12"]
        assert member._note_partition_shape_stores(tmp_path / "node") == []
    assert [(e["event"], e["stores"]) for e in logs] == [
        ("partition_shape_stores_left", ["p0", "p12"])
    ]

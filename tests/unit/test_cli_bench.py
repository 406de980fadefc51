"""`chronos bench` refuses up front what it could only fail at half an hour in."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from chronos.cli import bench


def test_missing_redis_server_is_a_usage_error_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real_which = shutil.which
    monkeypatch.setattr(
        shutil, "which", lambda name: None if name == "redis-server" else real_which(name)
    )
    # A bootstrap nobody listens on: reaching Kafka would hang or fail, not return 2 at once.
    args = argparse.Namespace(
        quick=True,
        only=["steady", "redis"],
        out=tmp_path,
        bootstrap="127.0.0.1:1",
        rates=None,
        seconds=None,
        scale=None,
        burst=None,
    )
    assert bench.main(args) == 2
    assert "redis-server not found" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written

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


@pytest.mark.skipif(not Path("/proc/meminfo").exists(), reason="available memory is read there")
def test_scale_beyond_the_embedded_brokers_memory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """100 M records need ~45 GiB in the memory-only broker: refused before it starts."""
    fits, needed, available = bench._scale_fits_embedded_broker(10**12)
    assert not fits and needed > (available or 0)
    args = argparse.Namespace(
        quick=True,
        only=["scale"],
        out=tmp_path,
        bootstrap=None,
        rates=None,
        seconds=None,
        scale=10**12,
        burst=None,
    )
    assert bench.main(args) == 2
    assert "--bootstrap" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written, no broker started


def test_scale_that_fits_is_not_refused() -> None:
    fits, needed, _ = bench._scale_fits_embedded_broker(1_000)
    assert fits and needed == 1_000 * bench._TANSU_BYTES_PER_RECORD

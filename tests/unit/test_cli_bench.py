"""`chronos bench` refuses up front what it could only fail at half an hour in."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from chronos.bench import host
from chronos.bench.stack import TopicLayout
from chronos.cli import bench
from chronos.settings import TopicSettings


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
        inner_partitions=1,
        target_partitions=8,
        baseline=None,
    )
    assert bench.main(args) == 2
    assert "redis-server not found" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_scale_beyond_the_embedded_brokers_memory_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """30 M records took 13.6 GiB in the memory-only broker: refused before it starts."""
    monkeypatch.setattr(host, "meminfo_bytes", lambda field: 8 << 30)
    args = argparse.Namespace(
        quick=True,
        only=["scale"],
        out=tmp_path,
        bootstrap=None,
        rates=None,
        seconds=None,
        scale=20_000_000,  # ~9 GiB
        burst=None,
        inner_partitions=1,
        target_partitions=8,
        broker="tansu",
        baseline=None,
    )
    assert bench.main(args) == 2
    err = capsys.readouterr().err
    assert "--bootstrap" in err and "--broker kafka" in err
    assert not list(tmp_path.iterdir())  # nothing written, no broker started


def test_scale_fits_up_to_four_fifths_of_the_available_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host, "meminfo_bytes", lambda field: 8 << 30)
    assert bench._scale_fits_embedded_broker(10_000_000)[0]  # ~4.5 GiB
    assert not bench._scale_fits_embedded_broker(15_000_000)[0]  # ~6.7 GiB > 6.4 GiB
    monkeypatch.setattr(host, "meminfo_bytes", lambda field: None)
    assert bench._scale_fits_embedded_broker(10**12)[0]  # unknown memory: not refused


@pytest.mark.parametrize("flag", ["--inner-partitions", "--target-partitions"])
def test_partitions_below_one_are_a_usage_error(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    # A bootstrap nobody listens on: reaching Kafka would hang or fail, not return 2 at once.
    args = parser.parse_args(
        ["bench", "--only", "steady", "--out", str(tmp_path), "--bootstrap", "127.0.0.1:1"]
        + [flag, "0"]
    )
    assert bench.main(args) == 2
    assert "partitions must be at least 1" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_partitions_default_to_the_settings_inner_count_and_eight_targets() -> None:
    """The benchmark measures the inner topic a new deployment gets, unless told otherwise."""
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench"])
    assert bench.layout_of(args) == TopicLayout(TopicSettings().inner_partitions, 8)
    assert TopicLayout() == TopicLayout(TopicSettings().inner_partitions, 8)

"""SIGTERM during a node's start-up stops it cleanly, whenever it arrives."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize("after_s", [0.05, 0.2, 0.4])
def test_sigterm_during_start_up_ends_the_node_cleanly(tmp_path: Path, after_s: float) -> None:
    config = tmp_path / "chronos.toml"
    # Nothing answers there: the node would wait for Kafka; the signal comes first.
    config.write_text(
        f'[kafka]\nbootstrap_servers = "127.0.0.1:9"\n[node]\ndata_dir = "{tmp_path / "store"}"\n'
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "chronos.cli.entry", "run", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(after_s)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, (process.returncode, err[-2000:])
    assert "SIGTERM" in out + err

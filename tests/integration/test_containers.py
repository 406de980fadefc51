"""The compose deployment the README gives, on images built here (docker/build.sh): a message
sent through the proxy container arrives, and killing the master container moves delivery to
the backup, every message exactly once (scripts/compose_check.py, whose summary this prints).

Skipped, saying why, where no Docker daemon answers or no compose command exists; run once per
suite (in the Apache Kafka pass: the deployment brings its own Apache Kafka image).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker import docker_available, is_tansu

REPO = Path(__file__).resolve().parents[2]


def _compose_available() -> bool:
    if shutil.which("docker-compose"):
        return True
    found = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return found.returncode == 0


@pytest.mark.timeout(900)
def test_compose_group_delivers_through_the_proxy_and_fails_over() -> None:
    if is_tansu():
        pytest.skip("runs once per suite, in the Apache Kafka pass (it brings its own broker)")
    if not docker_available():
        pytest.skip("no Docker daemon answers here")
    if not _compose_available():
        pytest.skip("neither docker-compose nor docker compose is installed")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "compose_check.py"), "--build", "--messages", "30"],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    summary_line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    print(summary_line)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads(summary_line)
    assert summary["delivered"] == summary["sent"] == 60 and summary["duplicates"] == 0
    assert summary["rejoined_as"] == "backup"

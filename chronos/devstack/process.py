"""A `chronos run` node as a child process: start, wait until it delivers, kill, restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

#: The log event a node writes once it has caught up with the inner topic and delivers.
READY_EVENT = "push_started"


class NodeProcess:
    """A node subprocess whose output goes to ``log_path`` (appended across restarts).

    Parameters:
        config: the node's TOML settings file.
        log_path: where stdout and stderr go.
        ready_event: the log event ``wait_ready`` waits for (a replica: ``ingest_caught_up``).
        source: the source tree of another release to run (its checkout's root, put first
            on the child's path), None for the chronos this interpreter imports. Its
            dependencies are this environment's.
        command: the ``chronos`` command to run instead of this interpreter's (another
            revision installed in its own venv, ``bench/revision.py``). It runs in the
            config's folder: a child it spawns puts its working directory first on its path,
            and a checkout there (this one) would be imported instead of its own.
    """

    def __init__(
        self,
        config: Path,
        log_path: Path,
        ready_event: str = READY_EVENT,
        source: Path | None = None,
        command: Sequence[str] | None = None,
    ) -> None:
        self._command = list(command or (sys.executable, "-m", "chronos.cli.entry"))
        self._cwd = source if command is None else config.parent
        self._ready_event = ready_event
        self._source = source
        self._config = config
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._ready_seen = 0
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        """The running child's pid."""
        assert self._process is not None, "not started"
        return self._process.pid

    def start(self) -> None:
        """Spawn the node (``started_at`` is the wall-clock spawn time, seconds)."""
        self._ready_seen = self._count_ready()
        self.started_at = time.time()
        env = None
        if self._source is not None:  # ahead of the installed chronos (an editable .pth)
            env = os.environ | {"PYTHONPATH": str(self._source)}
        elif self._command[0] != sys.executable:
            # Another revision's own command: nothing of this tree on its path.
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                [*self._command, "run", "--config", str(self._config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self._cwd,
            )

    def _count_ready(self) -> int:
        if not self._log_path.exists():
            return 0
        return self._log_path.read_text(errors="replace").count(self._ready_event)

    def wait_ready(self, timeout_s: float) -> bool:
        """True once this run caught up with the inner topic and started delivering."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._count_ready() > self._ready_seen:
                return True
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                raise RuntimeError(f"node exited with {code}, see {self._log_path}")
            time.sleep(0.05)
        return False

    def running(self) -> bool:
        """True while the child runs (it has not exited on its own)."""
        return self._process is not None and self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no chance to flush or persist anything."""
        assert self._process is not None
        self._process.send_signal(signal.SIGKILL)
        self._process.wait()

    def signal(self, signum: int) -> None:
        """Send ``signum`` (SIGSTOP/SIGCONT: freeze and thaw)."""
        assert self._process is not None
        self._process.send_signal(signum)

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait for the graceful drain; returns the exit code."""
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        return self._process.wait(timeout_s)

"""What the local brokers (Apache Kafka, Tansu) share: a child process to freeze, thaw, stop."""

from __future__ import annotations

import signal
import subprocess
from typing import Self


class BrokerProcess:
    """A broker running as a child process; subclasses start it and may clean up after it."""

    _process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Self:
        """Start the broker and wait until it answers."""
        raise NotImplementedError

    def stop(self) -> None:
        """Terminate the broker."""
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs (for CPU accounting in benchmarks)."""
        return None if self._process is None else self._process.pid

    def freeze(self) -> None:
        """SIGSTOP the broker: an outage in which sockets stay open but nothing answers."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def _terminate(self, grace_s: float) -> None:
        """SIGTERM (after SIGCONT: a frozen process cannot handle it), SIGKILL after
        ``grace_s``."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGCONT)
            self._process.terminate()
            try:
                self._process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

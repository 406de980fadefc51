"""What the local brokers (Apache Kafka, Tansu) share: a child process to freeze, thaw, stop."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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

    @contextmanager
    def _undone_on_failure(self, undo: Callable[[], None]) -> Iterator[None]:
        """Run ``undo`` (stop the process just launched) when the wait for it to answer fails
        in any way, a stop signal's ``SystemExit`` included: until the start returns, its
        caller holds nothing it could stop (a bench's SIGTERM once left a JVM running)."""
        try:
            yield
        except BaseException:
            undo()
            raise

    def _terminate(self, grace_s: float) -> None:
        """SIGTERM (after SIGCONT: a frozen process cannot handle it), SIGKILL after
        ``grace_s``; to the broker's whole process group when it leads one (started in a
        session of its own, as both brokers are: a launcher's child goes too)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        self._signal(process, signal.SIGCONT)
        self._signal(process, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self._signal(process, signal.SIGKILL)
            process.wait(10)

    @staticmethod
    def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
        try:
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)
        except ProcessLookupError:  # it ended meanwhile
            pass

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

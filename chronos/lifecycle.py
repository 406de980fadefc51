"""Lifecycle of long-running components: start, stop, join, loops that survive errors, and the
one way a component says the process cannot go on."""

from __future__ import annotations

import threading
from typing import Protocol

import structlog

from chronos.threadname import name_this_thread

log = structlog.get_logger(__name__)


class Component(Protocol):
    """Anything a role starts. ``stop`` asks; ``join`` waits at most ``timeout`` seconds."""

    name: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> None: ...
    def is_alive(self) -> bool: ...


class LoopWorker:
    """A thread that calls ``step`` until stopped; an exception is logged, backed off, survived.

    Subclasses implement ``step`` (one unit of work, bounded in time) and may override
    ``finish`` (runs once in the thread after the loop, e.g. a final commit).

    Parameters:
        name: thread and log name.
        error_backoff_s: pause after a failed step, doubling up to 5 s.
        stop: the event ``stop`` sets (a new one when None); shared with whatever waits on
            this thread and must wake when it is asked to stop.
    """

    def __init__(
        self, name: str, error_backoff_s: float = 0.1, stop: threading.Event | None = None
    ) -> None:
        self.name = name
        self._stop = threading.Event() if stop is None else stop
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._backoff = error_backoff_s

    @property
    def stopping(self) -> bool:
        """True once stop was requested."""
        return self._stop.is_set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("component_join_timeout", component=self.name, timeout_s=timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def step(self) -> None:
        """One bounded unit of work."""
        raise NotImplementedError

    def finish(self) -> None:
        """Runs once after the loop ends."""

    def _run(self) -> None:
        name_this_thread(self.name)
        backoff = self._backoff
        while not self._stop.is_set():
            try:
                self.step()
                backoff = self._backoff
            except Exception:
                log.exception("component_step_failed", component=self.name, backoff_s=backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        try:
            self.finish()
        except Exception:
            log.exception("component_finish_failed", component=self.name)


class Fatal:
    """Why this process cannot go on, reported by any thread; its entry point exits with it.

    Loops survive their errors (``LoopWorker``); what no retry can mend (Kafka refusing
    chronos' credentials, a producer that cannot be replaced) is reported here instead, once,
    and the node stops with exit code 1 and this reason.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._reported = threading.Event()

    def report(self, reason: str) -> None:
        """Say why the process must end; the first reason is the one kept."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
        log.critical("fatal_error", reason=reason)
        self._reported.set()

    @property
    def reason(self) -> str | None:
        """The first reported reason, None while there is none."""
        return self._reason

    def wait(self, timeout_s: float) -> bool:
        """True once a reason was reported (waits at most ``timeout_s``)."""
        return self._reported.wait(timeout_s)

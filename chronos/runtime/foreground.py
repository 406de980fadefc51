"""Running a node in the foreground: until SIGTERM or SIGINT, or until it cannot go on."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

import structlog

from chronos.node.interpreter import tune_interpreter

log = structlog.get_logger(__name__)


def run_foreground(
    start: Callable[[], None],
    stop: Callable[[], bool],
    fatal_error: Callable[[], str | None],
    stop_requested: threading.Event,
) -> int:
    """Start, wait for a stop signal or a fatal error (checked every second), stop; returns
    the process exit code (1: not clean, or fatal: the process manager restarts it).

    ``stop_requested`` is set by the signal: start-up waiting for Kafka ends early on it."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("node_signal", signal=signal.Signals(signum).name)
        stop_requested.set()

    earlier = signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    arrived = getattr(earlier, "arrived", None)
    if arrived:
        # A stop signal the early handling took (``cli/early.py``) whose exception Python may
        # have dropped (raised inside a weakref callback): the node stops as if it came now.
        on_signal(arrived[0], None)
    try:
        start()
    except Exception as exc:
        if not stop_requested.is_set():
            raise
        # Asked to stop while starting (Kafka not answering yet, say): a stop, not an error;
        # what did start is stopped below.
        log.info("node_stopped_during_start_up", error=str(exc))
        return 0 if stop() else 1
    tune_interpreter()
    fatal = None
    while not stop_requested.wait(1.0):
        fatal = fatal_error()
        if fatal is not None:
            break
    clean = stop()
    if fatal is not None:
        log.critical("node_exit_fatal", error=fatal, action="restart the process")
        return 1
    return 0 if clean else 1

"""Stop signals before a command installs its own handling: raised as ``StoppedEarly``
(``entry.py`` reports it), and given back to Python's default handling when a command starts
that does not keep them (``hand_back``).

Why a module of its own: ``entry.py`` sets these handlers and ``main.py`` hands them back; with
the handler in ``entry.py``, ``main.py`` imported ``entry.py`` back (a cycle), and under
``python -m chronos.cli.entry`` it imported a second copy of it whose handler was not the one
installed, so ``hand_back`` left the early handling in place. Only ``signal`` is imported here.
"""

from __future__ import annotations

import signal
from types import FrameType


class StoppedEarly(BaseException):
    """A stop signal arrived before the command installed its own handling."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _EarlyStop:
    """The early handler: raises ``StoppedEarly``, and keeps each signal it took in
    ``arrived``. Why keep them: Python prints and drops an exception raised inside a weakref
    callback, and a signal handled while one runs (the import system's module-lock cleanup,
    ``_get_module_lock.<locals>.cb``) raised there: the stop was lost and the node went on
    starting (seen once in CI). Whoever takes the signals over reads ``arrived`` (the node's
    handler: ``runtime/foreground.py``; any other command: ``hand_back``)."""

    def __init__(self) -> None:
        self.arrived: list[int] = []

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        self.arrived.append(signum)
        raise StoppedEarly(signum)


stop_early = _EarlyStop()


def hand_back(keep: bool) -> None:
    """Give stop signals back to Python's default handling once the command starts, unless it
    ``keep``s the early ones until it installs its own (the node). A stop signal that arrived
    meanwhile, its exception dropped, is raised again here."""
    if stop_early.arrived and not keep:
        raise StoppedEarly(stop_early.arrived[0])
    if keep or signal.getsignal(signal.SIGTERM) is not stop_early:
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def install() -> None:
    """Handle SIGTERM and SIGINT by raising ``StoppedEarly`` from now on."""
    signal.signal(signal.SIGTERM, stop_early)
    signal.signal(signal.SIGINT, stop_early)


def _exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def exit_through_cleanup() -> None:
    """SIGTERM and SIGINT raise ``SystemExit`` from now on, so every ``finally`` and
    ``__exit__`` on the way out runs: for a command that starts brokers and node processes
    (``chronos bench``, ``chronos dev`` while it starts). Python's default SIGTERM ends the
    process at once, and the brokers, in sessions of their own, ran on (a JVM holding 1 GiB
    was found 74 minutes after its bench had gone)."""
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)

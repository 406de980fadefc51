"""A broker node: builds the context, starts its role's components, stops them in reverse."""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from types import FrameType

import structlog

from chronos.clock import Clock, SystemClock
from chronos.errors import ConfigError
from chronos.kafka.admin import ensure_topics
from chronos.node.component import Component
from chronos.node.context import NodeContext, build_context
from chronos.node.ingest import IngestWorker
from chronos.node.roles import ROLES
from chronos.settings import ChronosSettings

log = structlog.get_logger(__name__)


#: Young-generation threshold of the cyclic collector (CPython's default is 700 allocations).
_GC_GEN0_THRESHOLD = 20_000
#: How long a thread may hold the GIL while another waits (CPython's default is 5 ms).
_GIL_SWITCH_INTERVAL_S = 0.001


def tune_interpreter() -> None:
    """Keep the cyclic garbage collector off the delivery path, and the GIL moving (process
    entry only).

    GIL: a push or sender thread that wakes for a due message waits for the GIL while ingest
    decodes a batch; each such hand-off could cost up to the switch interval. At 1 ms, p99
    lateness at 5,000 msg/s went from 21-39 ms to 14-17 ms, with the same burst throughput.

    Under load a node allocates ~20 container objects per message (records, jobs, header
    lists), so with CPython's defaults the collector ran hundreds of times a second and a full
    collection walked every object alive, the ~60,000 loaded at start included: collections held
    the GIL, and so stopped every thread, for up to 270 ms at 7,500 msg/s. Freezing what exists
    once the node runs takes it out of every later collection, and a larger young generation
    makes collections rarer. Messages are freed by reference counting anyway; the collector is
    only needed for the rare reference cycle.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(_GC_GEN0_THRESHOLD, gen1, gen2)
    sys.setswitchinterval(_GIL_SWITCH_INTERVAL_S)


class Node:
    """One chronos node.

    Parameters:
        settings: the settings tree.
        clock: time source (the system clock outside tests).
        role: a key of ``ROLES``.
    """

    def __init__(
        self, settings: ChronosSettings, clock: Clock | None = None, role: str = "master"
    ) -> None:
        if role not in ROLES:
            raise ConfigError(f"unknown role {role!r}; expected one of {sorted(ROLES)}")
        self.settings = settings
        self._clock = clock or SystemClock()
        self._role = role
        self._components: list[Component] = []
        self.context: NodeContext | None = None
        self._stopped = threading.Event()

    def start(self) -> None:
        """Create topics if configured, open the store, start every component."""
        if self.settings.topics.create:
            ensure_topics(self.settings)
        self.context = build_context(self.settings, self._clock)
        self._components = ROLES[self._role](self.context)
        for component in self._components:
            component.start()
        log.info(
            "node_started",
            node=self.settings.node.node_id,
            role=self._role,
            seek_ms=self.context.ledger.seek_ms,
            data_dir=str(self.settings.node.data_dir),
        )

    def wait_ready(self, timeout_s: float) -> bool:
        """True once every ingest consumer joined its group and caught up with the inner topic."""
        deadline = time.monotonic() + timeout_s
        for component in self._components:
            if isinstance(component, IngestWorker):
                if not component.caught_up.wait(max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def stop(self) -> None:
        """Stop components in reverse start order, each drained before the next, then close."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        deadline = time.monotonic() + self.settings.node.shutdown_timeout_s
        for component in reversed(self._components):
            component.stop()
            component.join(max(0.1, deadline - time.monotonic()))
        stuck = [c.name for c in self._components if c.is_alive()]
        if self.context is None:
            return
        if stuck:
            # Closing the store under a running thread could crash it mid-write; the process is
            # exiting anyway and RocksDB recovers from its WAL at the next start.
            log.error("node_stop_incomplete", still_running=stuck)
            return
        self.context.store.close()
        log.info("node_stopped", seek_ms=self.context.ledger.seek_ms)

    def fatal_error(self) -> str | None:
        """Why this node cannot go on (the producer failed fatally), or None."""
        if self.context is not None and self.context.delivery.fatal_error is not None:
            return str(self.context.delivery.fatal_error)
        return None

    def run(self) -> int:
        """Run until SIGTERM or SIGINT; returns the process exit code."""
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            log.info("node_signal", signal=signal.Signals(signum).name)
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.start()
        tune_interpreter()
        fatal = None
        while not stop.wait(1.0):
            fatal = self.fatal_error()
            if fatal is not None:
                break
        self.stop()
        if fatal is not None:
            log.critical("node_exit_fatal", error=fatal, action="restart the process")
            return 1
        return 0

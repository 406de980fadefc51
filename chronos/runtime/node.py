"""A broker node: builds the context, starts its role's components, stops them in reverse."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, TypeVar

import structlog

from chronos.clock import Clock, SystemClock
from chronos.errors import ConfigError
from chronos.group.replica import OpenElection, Replica
from chronos.kafka.admin import ensure_topics
from chronos.kafka.shared_ends import EndsFor
from chronos.kafka.topic_config import check_inner_topic
from chronos.lifecycle import Component
from chronos.node.ingest import IngestWorker
from chronos.runtime.context import NodeContext, build_context
from chronos.runtime.foreground import run_foreground
from chronos.runtime.roles import ROLES, role_of
from chronos.settings import ChronosSettings

if TYPE_CHECKING:
    from chronos.admin.server import AdminServer

log = structlog.get_logger(__name__)

C = TypeVar("C", bound=Component)


class Node:
    """One chronos node.

    Parameters:
        settings: the settings tree.
        clock: time source (the system clock outside tests).
        role: a key of ``ROLES``; by default what the settings ask for (``role_of``).
        open_election: for a replica, what tells it whether to lead instead of its group's
            election (a cluster's partitions, ``runtime/shard_host.py``).
        ends_for: where its questions about partition ends go (a cluster node's replicas
            share them, ``kafka/shared_ends.py``); None: asked on its own.
        serves_admin: whether it serves its own admin API when ``admin.enabled`` (a cluster's
            partition does not: its node serves one over all of them, ``runtime/cluster_view.py``).
    """

    def __init__(
        self,
        settings: ChronosSettings,
        clock: Clock | None = None,
        role: str | None = None,
        open_election: OpenElection | None = None,
        ends_for: EndsFor | None = None,
        serves_admin: bool = True,
    ) -> None:
        role = role or role_of(settings)
        if role not in ROLES:
            raise ConfigError(f"unknown role {role!r}; expected one of {sorted(ROLES)}")
        self.settings = settings
        self._clock = clock or SystemClock()
        self._role = role
        self._open_election = open_election
        self._ends_for = ends_for
        self._serves_admin = serves_admin
        self._components: list[Component] = []
        self.context: NodeContext | None = None
        self._stopped = threading.Event()
        self._admin: AdminServer | None = None
        self._started = threading.Event()
        #: A stop signal arrived (``run``): start-up waits no longer for Kafka.
        self._stop_requested = threading.Event()

    def start(self) -> None:
        """Create topics if configured, open the store, start every component."""
        if self.settings.topics.create:
            ensure_topics(self.settings, stopped=self._stop_requested.is_set)
        if self.settings.rebuild.check_inner_topic:
            # Refuses a topic that could remove a pending message's last record.
            check_inner_topic(self.settings)
        self.context = build_context(self.settings, self._clock)
        self.context.open_election = self._open_election
        self.context.ends_for = self._ends_for
        self._components = ROLES[self._role](self.context)
        if self.settings.admin.enabled and self._serves_admin:
            # Before the components: a port it cannot take ends the start with nothing running.
            self._start_admin(self.context)
        for component in self._components:
            component.start()
        self._started.set()
        log.info(
            "node_started",
            node=self.settings.node.node_id,
            role=self._role,
            seek_ms=self.context.ledger.seek_ms,
            data_dir=str(self.settings.node.data_dir),
        )

    def _start_admin(self, context: NodeContext) -> None:
        """The admin API (health, readiness, metrics); a port it cannot take ends the start."""
        from chronos.admin.server import serve_admin
        from chronos.runtime.probes import NodeProbes

        context.store.start_due_counts()  # the forecast's counts, built in the background
        self._admin = serve_admin(NodeProbes(self, context), self.settings)

    @property
    def admin_port(self) -> int | None:
        """Where the admin API listens, None when it does not run."""
        return None if self._admin is None else self._admin.port

    @property
    def components(self) -> list[Component]:
        """The running components, in start order."""
        return list(self._components)

    @property
    def started(self) -> bool:
        """Every component of its role was started."""
        return self._started.is_set()

    @property
    def replica(self) -> Replica | None:
        """This node's role in its replica group, None for a node alone."""
        return self.component(Replica)

    def component(self, kind: type[C]) -> C | None:
        """This node's running component of ``kind`` (tools and tests), None without one."""
        return next((c for c in self._components if isinstance(c, kind)), None)

    def wait_ready(self, timeout_s: float) -> bool:
        """True once every ingest consumer joined its group and caught up with the inner topic."""
        deadline = time.monotonic() + timeout_s
        for component in self._components:
            if isinstance(component, IngestWorker):
                if not component.caught_up.wait(max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def stop(self) -> bool:
        """Stop components in reverse start order, each drained before the next, then close.

        False when the stop was not clean: a component did not finish in time or the store
        could not be closed (its last progress may be lost: a restart delivers that again)."""
        if self._stopped.is_set():
            return True
        self._stopped.set()
        if self._admin is not None:
            self._admin.stop()  # asked only: its thread is joined after the components
        deadline = time.monotonic() + self.settings.node.shutdown_timeout_s
        for component in reversed(self._components):
            component.stop()
            component.join(max(0.1, deadline - time.monotonic()))
        if self._admin is not None:
            self._admin.join(5.0)
        stuck = [c.name for c in self._components if c.is_alive()]
        if self.context is None:
            return True
        if stuck:
            # Closing the store under a running thread could crash it mid-write; the process is
            # exiting anyway and RocksDB recovers from its WAL at the next start.
            log.error("node_stop_incomplete", still_running=stuck)
            return False
        try:
            self.context.store.close()
        except Exception as exc:  # e.g. a full disk: say so, without a traceback
            log.error(
                "node_stop_incomplete",
                error=str(exc),
                seek_ms=self.context.ledger.seek_ms,
                effect="what was delivered after the last persisted progress is delivered "
                "again at the next start",
            )
            return False
        log.info("node_stopped", seek_ms=self.context.ledger.seek_ms)
        return True

    def fatal_error(self) -> str | None:
        """Why this node cannot go on, or None: a component reported it (Kafka refused
        chronos' credentials), or the publisher could not replace a failed producer."""
        context = self.context
        if context is None:
            return None
        if context.fatal.reason is not None:
            return context.fatal.reason
        if context.publisher.fatal_error is not None:
            return f"no producer could replace a failed one: {context.publisher.fatal_error}"
        return None

    def run(self) -> int:
        """Run until SIGTERM or SIGINT; returns the process exit code."""
        return run_foreground(self.start, self.stop, self.fatal_error, self._stop_requested)

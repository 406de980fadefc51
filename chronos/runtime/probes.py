"""A running node's health, readiness and gauges, as the admin API reads them.

Health says whether the process should be restarted (a component died, Kafka refused
chronos' credentials, no producer could replace a failed one, the store's disk is below its
reserve); readiness whether it does its job now (ingest caught up with the inner topic, and for
a replica, a complete store standing for election). Role and term are in both answers.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import structlog

from chronos.admin.view import Check, Gauges, Report
from chronos.group.status import group_status
from chronos.metrics import CountingMetrics
from chronos.schedule.lookup import Lookup
from chronos.store import keys
from chronos.store.rocks import RocksStore
from chronos.types import EpochMs

log = structlog.get_logger(__name__)

#: How long a group's view is reused: it costs a few Kafka requests, and a dashboard polls.
_REPLICAS_TTL_S = 5.0

if TYPE_CHECKING:
    from chronos.runtime.context import NodeContext
    from chronos.runtime.node import Node


def delivery_lag_ms(store: RocksStore, seek_ms: EpochMs, now_ms: EpochMs) -> int:
    """How late the oldest stored message past the seek is at ``now_ms``; 0 when none is due.
    One store seek: cheap enough for every scrape."""
    oldest = store.first_key_from(keys.slot_bound(seek_ms + 1))
    return 0 if oldest is None else max(0, now_ms - keys.slot_of(oldest))


def kafka_check(proven_ms: EpochMs | None, now_ms: EpochMs, silence_s: float) -> Check:
    """Whether Kafka answers, as a cancel gate sees it: its watermark (``proven_ms``) moves
    with every probe Kafka answers (or batch read) and stops when Kafka does, which also
    holds delivery. So a broker down or frozen shows here within ``silence_s``."""
    if proven_ms is None:
        return Check("kafka", False, "no answer from Kafka yet")
    age_s = max(0, now_ms - proven_ms) / 1000.0
    if age_s > silence_s:
        return Check(
            "kafka",
            False,
            f"nothing proven from Kafka for {age_s:.1f} s (down, frozen or ingest that far "
            "behind): delivery is held",
        )
    return Check("kafka", True, f"inner topic proven up to {age_s:.1f} s ago")


class NodeProbes:
    """Answers the admin API's questions (``admin.view.NodeView``) about ``node``.

    Parameters:
        node: a started node (its context built).
        context: that node's context.
    """

    def __init__(self, node: Node, context: NodeContext) -> None:
        self._node = node
        self._context = context
        self._lookup = Lookup(
            context.store,
            context.ledger,
            context.settings.admin.list_scan_max,
            attempts_of=context.attempts.json_of,
        )
        self._replicas_lock = threading.Lock()
        self._replicas: tuple[float, list[dict[str, object]]] | None = None

    @property
    def lookup(self) -> Lookup:
        return self._lookup

    @property
    def local_lookup(self) -> Lookup:
        """A node's store is all it answers for."""
        return self._lookup

    def policies(self) -> dict[str, object]:
        return self._context.policies.as_json()

    def replicas(self) -> list[dict[str, object]]:
        role, term = self._role_and_term()
        ctx = self._context
        me: dict[str, object] = {
            "node": ctx.settings.node.node_id,
            "role": role,
            "term": term,
            "ingest_lag": None,
            "seek_lag_s": max(0, ctx.clock.now_ms() - ctx.ledger.seek_ms) / 1000.0,
        }
        spec = ctx.group
        if spec is None:
            return [me]
        with self._replicas_lock:
            cached = self._replicas
            if cached is not None and time.monotonic() - cached[0] < _REPLICAS_TTL_S:
                return cached[1]
            try:
                status = group_status(spec, ctx.clients, timeout_s=2.0)
            except Exception as exc:  # Kafka away: show this node alone, say why in the log
                log.info("group_view_unavailable", error=str(exc))
                return [me]
            seek_lag = None
            if status.committed_seek_ms is not None:
                seek_lag = max(0, ctx.clock.now_ms() - status.committed_seek_ms) / 1000.0
            view: list[dict[str, object]] = []
            for member in status.members:
                leading = member.node == (status.committed_by or status.master)
                view.append(
                    {
                        "node": member.node,
                        "role": "master" if leading else "backup",
                        "term": status.term if leading else None,
                        "ingest_lag": member.ingest_lag,
                        "seek_lag_s": seek_lag if leading else None,
                    }
                )
            self._replicas = (time.monotonic(), view or [me])
            return view or [me]

    @property
    def metrics(self) -> CountingMetrics:
        return self._context.metrics

    def _facts(self) -> dict[str, object]:
        role, term = self._role_and_term()
        return {"node": self._context.settings.node.node_id, "role": role, "term": term}

    def _role_and_term(self) -> tuple[str, int]:
        replica = self._node.replica
        if replica is None:
            return "alone", 0
        return replica.role, replica.term

    def health(self) -> Report:
        starting = not self._node.started
        stopped = [] if starting else [c.name for c in self._node.components if not c.is_alive()]
        fatal = self._node.fatal_error()
        disk = self._context.store.disk_problem()
        checks = [
            Check(
                "components",
                not stopped,
                f"not running: {', '.join(stopped)}"
                if stopped
                else ("starting" if starting else "all running"),
            ),
            Check("kafka_clients", fatal is None, fatal or "no fatal error"),
            Check("disk", disk is None, disk or "above the reserve"),
        ]
        return Report(checks, self._facts())

    def _kafka(self) -> Check:
        ctx = self._context
        return kafka_check(
            ctx.watermark.value, ctx.clock.now_ms(), ctx.settings.admin.kafka_silence_s
        )

    def readiness(self) -> Report:
        caught_up = self._node.wait_ready(0)
        kafka = self._kafka()
        applied = "applied the inner topic up to its end" + ("" if kafka.ok else " Kafka last told")
        checks = [
            Check("healthy", self.health().ok, "see /healthz"),
            kafka,
            Check("ingest_caught_up", caught_up, applied if caught_up else "catching up"),
        ]
        facts = self._facts()
        replica = self._node.replica
        if replica is not None:
            complete = replica.complete
            checks.append(
                Check(
                    "store_complete",
                    complete,
                    "holds every pending message" if complete else "waits for a refresh floor",
                )
            )
            facts["eligible"] = replica.standing
        return Report(checks, facts)

    def gauges(self) -> Gauges:
        role, term = self._role_and_term()
        ctx = self._context
        seek_ms, now_ms = ctx.ledger.seek_ms, ctx.clock.now_ms()
        return Gauges(
            role=role,
            term=term,
            seek_ms=seek_ms,
            now_ms=now_ms,
            stored_messages=ctx.store.messages_estimate(),
            ready=self.readiness().ok,
            delivery_lag_ms=delivery_lag_ms(ctx.store, seek_ms, now_ms),
        )

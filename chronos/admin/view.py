"""What the admin API asks of a node: its health, its readiness and its gauges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from chronos.listing import PageQuery
from chronos.metrics import MetricsReader


@dataclass(frozen=True)
class Check:
    """One named check: passed or not, and what was seen."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Report:
    """Checks and facts: ``ok`` when every check passed.

    Parameters:
        checks: the checks, in a stable order.
        facts: what a reader wants beside them (role, term, lag), JSON values.
    """

    checks: list[Check]
    facts: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in self.checks},
            **self.facts,
        }


@dataclass(frozen=True)
class Gauges:
    """A node's state as numbers, for Prometheus.

    Parameters:
        role: "alone", "master" or "backup".
        term: the term this node leads in or last saw committed (0 for a node alone).
        seek_ms: the persisted seek timestamp (epoch ms).
        now_ms: the node's clock when read.
        stored_messages: messages RocksDB estimates the store holds (pending, and delivered
            ones kept for ``delete.retention_s``).
        ready: whether ``/readyz`` would answer 200.
        delivery_lag_ms: how late the oldest stored message past the seek is (0 when none is
            due yet): what a consumer waits for. The seek lag is not that: an idle node
            persists its seek only when it scans (up to half a minute apart).
    """

    role: str
    term: int
    seek_ms: int
    now_ms: int
    stored_messages: int
    ready: bool
    delivery_lag_ms: int = 0


class Answer(Protocol):
    """A lookup's answer, as JSON."""

    def as_json(self) -> dict[str, object]: ...


class ScheduleReader(Protocol):
    """Status, listing and forecast over a node's store (``schedule.lookup.Lookup``); raises
    ``errors.NotReady`` while an answer cannot be given yet, ValueError for bad arguments."""

    def status(self, message_id: str) -> Answer: ...

    def page(self, query: PageQuery) -> Answer: ...

    def forecast(
        self, now_ms: int, horizon_s: int, bucket_s: int, repeats: bool = False
    ) -> Answer: ...


class NodeView(Protocol):
    """What the admin API reads (``runtime.probes.NodeProbes``, or a test's)."""

    @property
    def metrics(self) -> MetricsReader: ...

    @property
    def lookup(self) -> ScheduleReader:
        """Status, listing and forecast over what the node answers for (a cluster node: the
        whole cluster, asking the other nodes)."""
        ...

    @property
    def local_lookup(self) -> ScheduleReader:
        """The same over this node's own stores only (``?scope=local``: what a cluster node
        asks the others)."""
        ...

    def health(self) -> Report: ...
    def readiness(self) -> Report: ...
    def gauges(self) -> Gauges: ...

    def replicas(self) -> list[dict[str, object]]:
        """Every replica of the node's group as Kafka reports it (role, term, lag), or the
        node alone; JSON values."""
        ...

    def policies(self) -> dict[str, object]:
        """The delivery policy of each target topic this node delivers with: configured and
        set live (``delivery/policies.py``); JSON values."""
        ...

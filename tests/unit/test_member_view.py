"""A node-shape member's admin view (``runtime/member_view.py``): what ``/healthz`` and
``/readyz`` say, and whom a status is asked of. The answers across the cluster run on Apache
Kafka in ``tests/integration/test_cluster_node_shape.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from chronos.clock import FakeClock
from chronos.cluster.peers import Peers
from chronos.cluster.placement import Placement
from chronos.delivery.policies import Policies
from chronos.group.claims import Holding
from chronos.group.hosted import Hosted
from chronos.lifecycle import Component
from chronos.metrics import CountingMetrics
from chronos.runtime.member_view import MemberView

_MEMBERS = frozenset({"a", "b", "c"})
_PARTITIONS = 6


@dataclass
class _Host:
    """The host's state as the view reads it."""

    standing_now: frozenset[int] = frozenset()
    ingest_caught_up: bool = True
    proven: int | None = None
    hosted: Mapping[int, Hosted] = field(default_factory=dict)
    placed: Placement | None = field(default_factory=lambda: Placement.of(_MEMBERS, _PARTITIONS, 1))

    def placement(self) -> Placement | None:
        return self.placed

    def standing(self) -> frozenset[int]:
        return self.standing_now

    def caught_up(self) -> bool:
        return self.ingest_caught_up

    def proven_ms(self) -> int | None:
        return self.proven


@dataclass
class _Worker:
    name: str
    alive: bool = True

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> None: ...

    def is_alive(self) -> bool:
        return self.alive


@dataclass
class _Member:
    """The parts of a member the view asks, set by each test."""

    clock: FakeClock = field(default_factory=FakeClock)
    host: _Host = field(default_factory=_Host)
    delivering: frozenset[int] = frozenset()
    holdings: dict[int, Holding] = field(default_factory=dict)
    members: frozenset[str] | None = _MEMBERS
    workers: list[Component] = field(default_factory=list)
    fatal: str | None = None
    disk: str | None = None

    def view(self) -> MemberView:
        return MemberView(
            node_id="a",
            partitions=_PARTITIONS,
            host=self.host,
            delivering=lambda: self.delivering,
            holdings=lambda: self.holdings,
            members=lambda: self.members,
            components=lambda: self.workers,
            fatal=lambda: self.fatal,
            disk_problem=lambda: self.disk,
            peers=Peers(lambda _node: None),
            metrics=CountingMetrics(),
            policies=Policies({}),
            clock=self.clock,
            scan_max=1000,
            kafka_silence_s=5.0,
        )


def _ready_member() -> tuple[_Member, list[int]]:
    """A member whose placed partitions are all delivered or standing, Kafka heard now."""
    member = _Member()
    member.host.proven = member.clock.now_ms()
    placed = member.host.placed
    assert placed is not None
    mine = sorted(placed.hosted_by("a"))
    owned = frozenset(placed.owned_by("a"))
    member.delivering = owned
    member.host.standing_now = frozenset(mine) - owned
    return member, mine


def _failed(report_json: dict[str, object]) -> list[str]:
    checks = report_json["checks"]
    assert isinstance(checks, dict)
    return sorted(name for name, check in checks.items() if not check["ok"])


def test_ready_once_every_partition_placed_here_is_delivered_or_stands() -> None:
    """Mutant caught: readiness without the placed partitions (a rolling restart would go
    on to the next node while this one's copies still restore: no warm standby)."""
    member, mine = _ready_member()
    view = member.view()
    assert view.readiness().ok, view.readiness().as_json()
    restoring = mine[-1]
    member.host.standing_now = member.host.standing_now - {restoring}
    member.delivering = member.delivering - {restoring}
    report = view.readiness().as_json()
    assert _failed(report) == ["partitions_standing"]
    checks = report["checks"]
    assert isinstance(checks, dict)
    assert str([restoring]) in checks["partitions_standing"]["detail"]
    member.host.standing_now = member.host.standing_now | {restoring}
    assert view.readiness().ok


def test_not_ready_before_a_placement_outside_the_group_or_while_ingest_catches_up() -> None:
    member, _ = _ready_member()
    view = member.view()
    member.members = frozenset({"b", "c"})
    assert _failed(view.readiness().as_json()) == ["member", "partitions_standing"]
    member.members = _MEMBERS
    member.host.ingest_caught_up = False
    assert _failed(view.readiness().as_json()) == ["ingest_caught_up"]
    member.host.ingest_caught_up = True
    member.host.placed = None
    assert _failed(view.readiness().as_json()) == ["partitions_standing", "placed"]


def test_not_ready_when_kafka_proved_nothing_for_longer_than_the_silence_allows() -> None:
    member, _ = _ready_member()
    view = member.view()
    member.clock.advance(4_000)
    assert view.readiness().ok
    member.clock.advance(2_000)
    assert _failed(view.readiness().as_json()) == ["kafka"]
    member.host.proven = None
    assert _failed(view.readiness().as_json()) == ["kafka"]


def test_unhealthy_when_a_worker_died_a_client_failed_or_the_disk_is_full() -> None:
    member, _ = _ready_member()
    member.workers = [_Worker("ingest"), _Worker("delivery", alive=False)]
    view = member.view()
    health = view.health().as_json()
    assert _failed(health) == ["components"]
    checks = health["checks"]
    assert isinstance(checks, dict)
    assert checks["components"]["detail"] == "not running: delivery"
    assert _failed(view.readiness().as_json()) == ["healthy"]
    member.workers = []
    member.fatal = "the transactional producer was fenced for good"
    member.disk = "below the disk reserve"
    assert _failed(view.health().as_json()) == ["disk", "kafka_clients"]


def test_a_status_is_asked_of_the_node_delivering_the_partition_first() -> None:
    """Its outcomes are recorded there; a standby knows the state only. Mutant caught: the
    placement's order alone (the owner named there may not deliver it yet)."""
    member, _ = _ready_member()
    view = member.view()
    placed = member.host.placed
    assert placed is not None
    elsewhere = next(p for p in range(_PARTITIONS) if p not in member.delivering)
    # A holder the placement does not name first (the partition not moved to its owner yet).
    holder = sorted(_MEMBERS - {"a", placed.hosts[elsewhere][0]})[0]
    member.holdings = {elsewhere: Holding(holder)}
    order = view._hosts_of(elsewhere)
    assert order[0] == holder and set(order) == {holder, *placed.hosts[elsewhere]}
    assert len(order) == len(set(order)), "each node asked once"
    # A partition this member still delivers though the placement names another first.
    here = next(p for p in range(_PARTITIONS) if placed.hosts[p][0] != "a")
    member.delivering = member.delivering | {here}
    member.holdings = {}
    assert view._hosts_of(here)[0] == "a", "this member delivers it: asked first"

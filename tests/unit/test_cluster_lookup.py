"""Answers across a cluster: a listing merged from several partitions' pages, a forecast
summed, a status asked of the id's partition's nodes in turn (no broker, no HTTP)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from chronos.admin.view import ScheduleReader
from chronos.cluster.lookup import (
    ClusterLookup,
    JsonAnswer,
    LocalLookup,
    MergedForecast,
    merge_forecasts,
)
from chronos.cluster.peers import Peers, PeerUnavailable
from chronos.errors import NotReady
from chronos.kafka.partitioner import partition_of
from chronos.listing import PageQuery
from chronos.store import keys


@dataclass
class _Page:
    rows: list[dict[str, object]]
    cursor: str | None
    scanned: int

    def as_json(self) -> dict[str, object]:
        return {"rows": self.rows, "cursor": self.cursor, "scanned": self.scanned}


@dataclass
class _Reader:
    """One partition's store: rows in key order; a page reads at most ``scan`` of them (a
    page may end early with a cursor, as ``admin.list_scan_max`` makes it)."""

    rows: list[dict[str, object]]
    scan: int
    statuses: dict[str, str] = field(default_factory=dict)

    def status(self, message_id: str) -> JsonAnswer:
        return JsonAnswer({"id": message_id, "state": self.statuses.get(message_id, "unknown")})

    def page(self, query: PageQuery) -> _Page:
        after = b"" if query.cursor is None else bytes.fromhex(query.cursor)
        ahead = [r for r in self.rows if _key(r) > after]
        read = ahead[: min(self.scan, query.limit)]
        more = len(ahead) > len(read)
        return _Page(read, _key(read[-1]).hex() if more and read else None, len(read))

    def forecast(
        self, now_ms: int, horizon_s: int, bucket_s: int, repeats: bool = False
    ) -> JsonAnswer:
        return JsonAnswer(
            {"from_ms": 60_000, "bucket_s": bucket_s, "counts": [len(self.rows), 1], "overdue": 2}
        )


def _key(row: Mapping[str, object]) -> bytes:
    return keys.message_key(int(str(row["slot_ms"])), str(row["id"]))


def _rows(prefix: str, slots: list[int]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [
        {"id": f"{prefix}{n}", "slot_ms": s} for n, s in enumerate(slots)
    ]
    return sorted(rows, key=_key)


def test_paging_through_merged_partitions_lists_every_row_once_in_key_order() -> None:
    """Mutant caught: rows beyond the smallest cursor kept (partition A stops early at its
    scan bound, B's later rows fill the page, and the next page starts after them: A's rows
    in between are never listed)."""
    a_rows = _rows("a", [10, 20, 30, 40, 50, 60, 70])
    b_rows = _rows("b", [15, 25, 35, 45, 55, 65, 75, 85])
    a, b = _reader(a_rows, scan=1), _reader(b_rows, scan=50)
    local = LocalLookup(2, lambda p: None, lambda: {0: a, 1: b})
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(50):
        page = local.page(PageQuery(0, 1 << 40, cursor=cursor, limit=4))
        assert page.partitions == [0, 1] and page.missing == []
        seen += [str(row["id"]) for row in page.rows]
        cursor = page.cursor
        if cursor is None:
            break
    expected = sorted(a_rows + b_rows, key=_key)
    assert seen == [str(r["id"]) for r in expected]


def _reader(rows: list[dict[str, object]], scan: int) -> ScheduleReader:
    return _Reader(rows, scan)


def test_forecasts_of_partitions_add_up_and_name_the_missing_ones() -> None:
    merged = merge_forecasts(
        [
            {
                "from_ms": 60_000,
                "bucket_s": 60,
                "counts": [1, 2, 3],
                "overdue": 1,
                "partitions": [0],
            },
            {"from_ms": 60_000, "bucket_s": 60, "counts": [10], "overdue": 4, "partitions": [2]},
        ],
        4,
    )
    assert isinstance(merged, MergedForecast)
    assert merged.counts == [11, 2, 3] and merged.overdue == 5
    assert merged.as_json()["total"] == 16
    assert merged.partitions == [0, 2] and merged.missing == [1, 3]
    with pytest.raises(NotReady):
        merge_forecasts([], 4)


class _Peers(Peers):
    """Other nodes' answers, decided by the test (a node missing from ``answers`` is down)."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        super().__init__(lambda node: None)
        self.answers = answers
        self.asked: list[str] = []

    def get(self, node: str, path: str, params: Mapping[str, object]) -> dict[str, Any]:
        self.asked.append(node)
        if node not in self.answers:
            raise PeerUnavailable(f"{node} gave no answer")
        return self.answers[node]


def test_a_status_is_asked_of_the_ids_owner_then_of_its_standbys() -> None:
    """The owner (another node) is down: this node's standby replica answers. Mutant caught:
    only the owner asked (a 503 while a standby holds every state)."""
    message_id = "order-1"
    partition = partition_of(message_id.encode(), 4)
    reader = _Reader([], 10, {message_id: "pending"})
    local = LocalLookup(
        4,
        lambda p: reader if p == partition else None,
        lambda: {},
    )
    peers = _Peers({})
    lookup = ClusterLookup("me", local, peers, lambda: ["me", "other"], lambda p: ["other", "me"])
    answer = lookup.status(message_id).as_json()
    assert answer == {"id": message_id, "state": "pending", "inner_partition": partition}
    assert peers.asked == ["other"]
    peers.answers["other"] = {"id": message_id, "state": "delivered"}
    assert lookup.status(message_id).as_json()["state"] == "delivered"


def test_a_status_nobody_can_answer_says_who_was_asked() -> None:
    """Mutant caught: a partition without any answering replica reported "unknown" (as if the
    id never existed) instead of not ready."""
    local = LocalLookup(4, lambda p: None, lambda: {})
    lookup = ClusterLookup("me", local, _Peers({}), lambda: ["me", "x"], lambda p: ["x", "me"])
    with pytest.raises(NotReady, match="x: x gave no answer; me: partition"):
        lookup.status("order-2")


def test_a_listing_across_the_cluster_names_partitions_a_down_node_delivers_as_missing() -> None:
    rows = _rows("a", [10, 20])
    local = LocalLookup(3, lambda p: None, lambda: {0: _reader(rows, 10)})
    peers = _Peers(
        {"up": {"rows": _rows("c", [15]), "cursor": None, "scanned": 1, "partitions": [2]}}
    )
    lookup = ClusterLookup("me", local, peers, lambda: ["down", "me", "up"], lambda p: [])
    page = lookup.page(PageQuery(0, 1 << 40, limit=10))
    assert [r["id"] for r in page.rows] == ["a0", "c0", "a1"]
    assert page.partitions == [0, 2] and page.missing == [1]
    assert sorted(peers.asked) == ["down", "up"]

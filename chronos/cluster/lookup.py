"""Status, listing and forecast of a cluster: what the admin API answers on a cluster node.

A message lives in the store of its inner partition's replicas, so:

* **status by id** goes to the id's partition (Kafka's partitioner, as the proxy produced it):
  answered here when this node's replica of it stands, else asked of the nodes the placement
  names for it (owner first, then standbys) with ``scope=local``;
* **listing and forecast** merge what each member answers for the partitions it delivers now
  (``scope=local``), so each partition is counted once, by its one master. A partition nobody
  delivers at that moment (a takeover under way) or whose node did not answer is named in the
  answer's ``missing``, never silently left out.

Listing pages merge by store key (slot, then id): every part lists in that order and says where
it stopped (its cursor); the merged page keeps only rows up to the smallest such cursor, so the
next page (from the merged cursor) repeats and skips nothing.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chronos.admin.view import ScheduleReader
from chronos.cluster.peers import Peers, PeerUnavailable
from chronos.errors import NotReady
from chronos.kafka.partitioner import partition_of
from chronos.listing import PageQuery
from chronos.schedule.lookup import Forecast
from chronos.store import keys


@dataclass
class JsonAnswer:
    """An answer already in JSON form (a peer's, or a local one with the partition added)."""

    body: dict[str, Any]

    def as_json(self) -> dict[str, object]:
        return dict(self.body)


@dataclass
class PagePart:
    """One source's page: rows in key order, where it stopped, which partitions it covers."""

    rows: list[dict[str, Any]]
    cursor: str | None
    scanned: int
    partitions: list[int]


@dataclass
class MergedPage:
    """A listing page over several partitions."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    cursor: str | None = None
    scanned: int = 0
    partitions: list[int] = field(default_factory=list)
    #: Partitions not listed: nobody delivered them when asked, or their node did not answer.
    missing: list[int] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "cursor": self.cursor,
            "scanned": self.scanned,
            "partitions": self.partitions,
            "missing": self.missing,
        }


def _key(row: dict[str, Any]) -> bytes:
    return keys.message_key(int(row["slot_ms"]), str(row["id"]))


def merge_pages(parts: Sequence[PagePart], limit: int, partitions: int) -> MergedPage:
    """One page from parts listed from the same cursor: rows up to the smallest cursor a
    part stopped at (beyond it that part may hold rows not read yet), at most ``limit``."""
    bounds = [bytes.fromhex(part.cursor) for part in parts if part.cursor is not None]
    bound = min(bounds, default=None)
    rows = sorted((row for part in parts for row in part.rows), key=_key)
    if bound is not None:
        rows = [row for row in rows if _key(row) <= bound]
    page = MergedPage(scanned=sum(part.scanned for part in parts))
    covered = sorted({p for part in parts for p in part.partitions})
    page.partitions = covered
    page.missing = sorted(set(range(partitions)) - set(covered))
    if len(rows) > limit:
        page.rows = rows[:limit]
        page.cursor = _key(page.rows[-1]).hex()
    else:
        page.rows = rows
        page.cursor = None if bound is None else bound.hex()
    return page


@dataclass
class MergedForecast:
    """Pending messages per bucket over several partitions."""

    from_ms: int
    bucket_s: int
    counts: list[int]
    overdue: int
    partitions: list[int]
    missing: list[int]
    repeats: int = 0
    repeats_complete: bool = True

    def as_json(self) -> dict[str, object]:
        counts = Forecast(
            self.from_ms,
            self.bucket_s,
            self.counts,
            self.overdue,
            self.repeats,
            self.repeats_complete,
        ).as_json()
        return counts | {"partitions": self.partitions, "missing": self.missing}


def merge_forecasts(parts: Sequence[dict[str, Any]], partitions: int) -> MergedForecast:
    """The element-wise sum of forecasts asked with the same horizon and bucket."""
    if not parts:
        raise NotReady("no node delivers any partition now")
    width = max(len(part["counts"]) for part in parts)
    counts = [0] * width
    for part in parts:
        for index, count in enumerate(part["counts"]):
            counts[index] += int(count)
    covered = sorted({int(p) for part in parts for p in part.get("partitions", [])})
    return MergedForecast(
        from_ms=min(int(part["from_ms"]) for part in parts),
        bucket_s=int(parts[0]["bucket_s"]),
        counts=counts,
        overdue=sum(int(part["overdue"]) for part in parts),
        partitions=covered,
        missing=sorted(set(range(partitions)) - set(covered)),
        repeats=sum(int(part.get("repeats", 0)) for part in parts),
        repeats_complete=all(bool(part.get("repeats_complete", True)) for part in parts),
    )


#: A partition's store on this node, if its replica stands here: (partition) -> reader.
StandingReader = Callable[[int], ScheduleReader | None]


class LocalLookup:
    """This node's partitions only: status from any replica of it that stands here (a standby
    knows every state, only not where a delivery went), listing and forecast over the
    partitions it delivers now.

    Parameters:
        partitions: how many the inner topic has.
        standing: the reader of a partition whose replica stands here, else None.
        delivering: the partitions whose replica here delivers now, with their readers.
    """

    def __init__(
        self,
        partitions: int,
        standing: StandingReader,
        delivering: Callable[[], dict[int, ScheduleReader]],
    ) -> None:
        self.partitions = partitions
        self._standing = standing
        self._delivering = delivering

    def partition_of(self, message_id: str) -> int:
        return partition_of(message_id.encode(), self.partitions)

    def status(self, message_id: str) -> JsonAnswer:
        partition = self.partition_of(message_id)
        reader = self._standing(partition)
        if reader is None:
            raise NotReady(f"partition {partition} has no replica standing on this node")
        return JsonAnswer(reader.status(message_id).as_json() | {"inner_partition": partition})

    def page_part(self, query: PageQuery) -> PagePart:
        parts = []
        readers = self._delivering()
        for partition, reader in sorted(readers.items()):
            body = reader.page(query).as_json()
            parts.append(_part(body, [partition]))
        merged = merge_pages(parts, query.limit, self.partitions)
        return PagePart(merged.rows, merged.cursor, merged.scanned, sorted(readers))

    def page(self, query: PageQuery) -> MergedPage:
        return merge_pages([self.page_part(query)], query.limit, self.partitions)

    def forecast_part(
        self, now_ms: int, horizon_s: int, bucket_s: int, repeats: bool = False
    ) -> dict[str, Any]:
        readers = self._delivering()
        if not readers:
            return {
                "from_ms": now_ms - now_ms % 60_000,
                "bucket_s": bucket_s,
                "counts": [],
                "overdue": 0,
                "partitions": [],
            }
        parts = [
            reader.forecast(now_ms, horizon_s, bucket_s, repeats).as_json() | {"partitions": [p]}
            for p, reader in sorted(readers.items())
        ]
        merged = merge_forecasts(parts, self.partitions)
        return merged.as_json()

    def forecast(
        self, now_ms: int, horizon_s: int, bucket_s: int, repeats: bool = False
    ) -> MergedForecast:
        return merge_forecasts(
            [self.forecast_part(now_ms, horizon_s, bucket_s, repeats)], self.partitions
        )


def _part(body: dict[str, Any], partitions: list[int]) -> PagePart:
    return PagePart(
        rows=list(body.get("rows", [])),
        cursor=body.get("cursor"),
        scanned=int(body.get("scanned", 0)),
        partitions=partitions,
    )


class ClusterLookup:
    """The whole cluster's answers, from this node's partitions and the other members'.

    Parameters:
        node_id: this node.
        local: this node's partitions.
        peers: the other nodes' admin APIs.
        members: the cluster's members now.
        hosts_of: the nodes the placement names for a partition, owner first.
    """

    def __init__(
        self,
        node_id: str,
        local: LocalLookup,
        peers: Peers,
        members: Callable[[], Sequence[str]],
        hosts_of: Callable[[int], Sequence[str]],
    ) -> None:
        self._node_id = node_id
        self._local = local
        self._peers = peers
        self._members = members
        self._hosts_of = hosts_of

    def status(self, message_id: str) -> JsonAnswer:
        partition = self._local.partition_of(message_id)
        why: list[str] = []
        for node in self._hosts_of(partition):
            try:
                if node == self._node_id:
                    return self._local.status(message_id)
                path = f"/v1/messages/{urllib.parse.quote(message_id, safe='')}"
                return JsonAnswer(self._peers.get(node, path, {}))
            except (NotReady, PeerUnavailable) as exc:
                why.append(f"{node}: {exc}")
        raise NotReady(
            f"no replica of partition {partition} answered: " + ("; ".join(why) or "no members")
        )

    def page(self, query: PageQuery) -> MergedPage:
        parts = [self._local.page_part(query)]
        params = query.as_params()
        for node in self._others():
            try:
                body = self._peers.get(node, "/v1/messages", params)
            except PeerUnavailable:
                continue  # its partitions show as missing
            parts.append(_part(body, [int(p) for p in body.get("partitions", [])]))
        return merge_pages(parts, query.limit, self._local.partitions)

    def forecast(
        self, now_ms: int, horizon_s: int, bucket_s: int, repeats: bool = False
    ) -> MergedForecast:
        parts = [self._local.forecast_part(now_ms, horizon_s, bucket_s, repeats)]
        params: dict[str, object] = {"horizon_s": horizon_s, "bucket_s": bucket_s}
        if repeats:
            params["repeats"] = "true"
        for node in self._others():
            try:
                parts.append(self._peers.get(node, "/v1/forecast", params))
            except PeerUnavailable:
                continue
        return merge_forecasts(parts, self._local.partitions)

    def _others(self) -> list[str]:
        return [node for node in self._members() if node != self._node_id]

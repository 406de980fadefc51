"""What a listing of stored messages asks for (``GET /v1/messages``): one query object from the
HTTP handler through a cluster's merge to each store's ``Lookup.page``, and to peers as the
same query parameters."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

ListState = Literal["pending", "delivered", "dead_lettered", "any"]

#: Past every slot a store can hold (``store/keys.py`` keys a slot with 8 bytes).
END_MS = (1 << 64) - 2


@dataclass(frozen=True, slots=True)
class PageQuery:
    """One page of a listing.

    Parameters:
        from_ms: the first slot listed (inclusive).
        to_ms: the slot the listing stops before.
        topic: only messages for this target topic; None lists every topic.
        state: which messages: pending, delivered, dead-lettered or any of them.
        cursor: where the previous page stopped (its ``cursor``); None starts at ``from_ms``.
        limit: the most rows a page holds (a store caps it at ``schedule.lookup.MAX_PAGE``).
    """

    from_ms: int = 0
    to_ms: int = END_MS
    topic: str | None = None
    state: ListState = "pending"
    cursor: str | None = None
    limit: int = 100

    def as_params(self) -> dict[str, object]:
        """The query as ``/v1/messages`` takes it (what a cluster node asks its peers)."""
        return asdict(self)

"""What delivery asks of the cancel gate: how far it may deliver, and what it waits for.

The gate itself is ``node/watermark.py``'s ``IngestWatermark``; the node alone's push and a
replica group's or cluster member's lanes ask it through this, so that ``group/`` needs no
import of ``node/``.
"""

from __future__ import annotations

from typing import Protocol

from chronos.types import EpochMs


class CancelGate(Protocol):
    """How far delivery may go without outrunning a cancel Kafka acknowledged."""

    def horizon(self, now_ms: EpochMs) -> EpochMs:
        """The last slot delivery may cover at ``now_ms``."""
        ...

    def want(self, slot: EpochMs) -> None:
        """Delivery waits for ``slot`` (due now or later): have the horizon reach it by then,
        without asking Kafka while nothing waits (the gate's probes follow demand)."""
        ...

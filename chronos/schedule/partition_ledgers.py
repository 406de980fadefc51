"""One ingest for every partition a node hosts: each decoded record goes to the ledger of its
inner partition (its schedule, ``RocksStore.of_partition``), with that partition's offset.

A cluster node of the second shape (``docs/design/cluster-v2.md``) reads every hosted
partition, owner or standby, through one consumer and one decoder, instead of one per
partition. Its writes stay per partition: each partition's records and its next offset go in
one write of its own schedule, so a partition's schedule alone says where its ingest resumes,
and one partition can be restored, dropped or handed over alone. A crash between two
partitions' writes of one batch replays the later partition's records only (its offset was not
stored), never skips them; a batch applied again after such a failure (ingest holds a batch
the full disk refused) skips the partitions whose offset already covers it. Order within a
partition is kept; across partitions there is none to keep.

The WAL is the database's, shared by every partition: one sync makes all of them durable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields

from chronos.model import DecodedRequest
from chronos.schedule.ledger import ApplyOutcome, Ledger


class PartitionLedgers:
    """The ledgers of the partitions one ingest reads, by inner partition; what an
    ``IngestWorker`` writes through (``node/ingest.py``'s ``IngestTarget``).

    Parameters:
        ledgers: the ledger of each partition (their stores share one ``RocksDatabase``).
    """

    def __init__(self, ledgers: Mapping[int, Ledger]) -> None:
        if not ledgers:
            raise ValueError("an ingest writes at least one partition")
        self._ledgers = dict(ledgers)
        #: Any of them: the WAL, and so its sync, is the shared database's.
        self._any = next(iter(self._ledgers.values()))
        #: The next offset each partition's last write stored, in this process (a batch
        #: applied again after a failed write skips what these cover; no read of the store).
        self._written: dict[int, int] = {}

    @property
    def partitions(self) -> list[int]:
        """The partitions written, in order."""
        return sorted(self._ledgers)

    def inner_offsets(self, partitions: list[int]) -> dict[int, int]:
        """Where ingest resumes: each partition's next offset, from its own schedule."""
        found: dict[int, int] = {}
        for partition in partitions:
            found |= self._ledger(partition).inner_offsets([partition])
        return found

    def apply_decoded(
        self,
        items: Sequence[DecodedRequest],
        offsets: Mapping[int, int] | None = None,
        origins: Sequence[tuple[int, int]] | None = None,
    ) -> ApplyOutcome:
        """Apply a batch read from several partitions: each partition's items, in order, and
        its offset in one write of its schedule (``Ledger.apply_decoded``). ``origins`` name
        each item's partition: a batch without them is refused (it could not be routed)."""
        offsets = offsets or {}
        if items and (origins is None or len(origins) != len(items)):
            raise ValueError("a batch for several partitions names each item's partition")
        shares: dict[int, tuple[list[DecodedRequest], list[tuple[int, int]]]] = {}
        for item, origin in zip(items, origins or (), strict=False):
            share = shares.setdefault(origin[0], ([], []))
            share[0].append(item)
            share[1].append(origin)
        written = sorted(shares.keys() | offsets.keys())
        for partition in written:
            self._ledger(partition)  # all hosted, or nothing written
        total = ApplyOutcome()
        for partition in written:
            at_offset = offsets.get(partition)
            if at_offset is not None and self._written.get(partition, -1) >= at_offset:
                # Stored by an earlier try of this batch (the write of a later partition
                # failed, ``StoreFull``, and ingest applies the batch again): never twice.
                continue
            share_items, share_origins = shares.get(partition, ([], []))
            at = {partition: offsets[partition]} if partition in offsets else None
            outcome = self._ledger(partition).apply_decoded(share_items, at, share_origins)
            if at_offset is not None:
                self._written[partition] = at_offset
            for counted in fields(ApplyOutcome):
                name = counted.name
                setattr(total, name, getattr(total, name) + getattr(outcome, name))
        return total

    def sync(self) -> None:
        """fsync everything applied so far (every partition's: one WAL)."""
        self._any.sync()

    def sync_if_due(self) -> bool:
        """``sync`` once the sync interval has passed; True if it ran."""
        return self._any.sync_if_due()

    def _ledger(self, partition: int) -> Ledger:
        ledger = self._ledgers.get(partition)
        if ledger is None:
            raise KeyError(f"inner partition {partition} is not hosted by this ingest")
        return ledger

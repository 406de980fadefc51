"""Whether a store holds everything it must: where its ingest began, against the rebuild floor.

A store that read a partition from its first offset (0) saw every record of it. One that began
later (a new or wiped store, after retention removed the topic's head) holds every message
still pending only once a refresh pass has re-appended them at or above where it began: when
the published floor (``floor.py``) reached that offset. Until then it may lack a message whose
only records were removed, and it must not deliver: a replica does not stand for election, a
node alone does not start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chronos.schedule.floor import Floor


@dataclass(frozen=True)
class StoreOrigin:
    """Where a store's ingest began, per inner partition it owns.

    Parameters:
        began: inner offset ingest began at per partition (0: from the first record).
        gaps: partitions whose stored offset had fallen behind the topic's start when the
            node started: (stored next offset, topic's first offset); the store was cleared.
        fresh: the store has no seek yet (new, wiped or cleared, or its rebuild did not
            finish): a node alone then rebuilds from the inner topic and its published progress.
        compacted: the inner topic is compacted by id (``rebuild.mode = "compact"``).
    """

    began: dict[int, int]
    gaps: dict[int, tuple[int, int]] = field(default_factory=dict)
    fresh: bool = False
    compacted: bool = False

    def missing(self, floor: Floor | None) -> dict[int, int]:
        """Partitions (and where ingest began) whose removed records may hold messages this
        store lacks, given the latest published ``floor``. None on a compacted inner topic
        (``compacted``): the cleaner removes only records a later one of their id replaced,
        so a store that began at the topic's start reads every id's last record."""
        if self.compacted:
            return {}
        return {
            partition: began
            for partition, began in self.began.items()
            if began > 0 and (floor is None or floor.offsets.get(partition, 0) < began)
        }

    def complete(self, floor: Floor | None) -> bool:
        """True when the store holds everything a node that read the whole topic would."""
        return not self.missing(floor)

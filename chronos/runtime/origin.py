"""At start: does the store continue the inner topic where it left it, or must it start over?"""

from __future__ import annotations

import structlog

from chronos.kafka.admin import log_start_offsets
from chronos.schedule.floor import Floor
from chronos.schedule.origin import StoreOrigin
from chronos.settings import ChronosSettings
from chronos.store.rocks import RocksStore

log = structlog.get_logger(__name__)


def establish_origin(
    settings: ChronosSettings, store: RocksStore, partitions: list[int], floor: Floor | None
) -> StoreOrigin:
    """Compare the store's inner offsets with where Kafka's copy of each partition starts.

    A partition the store never read begins where the topic now starts. A store whose next
    offset lies below the topic's start missed records retention removed (it was offline too
    long): whatever it holds may be stale (a cancel it never saw), so it is cleared and rebuilt
    from the topic like a new one. A store of an earlier release that read a partition counts
    as having read it from the start, as it always did.

    A store that starts empty begins at the published rebuild ``floor`` where that lies past
    the topic's start: everything it must hold has a record there or later, so a rebuild reads
    about one refresh interval of the topic instead of all it retains.
    """
    starts = log_start_offsets(settings, settings.topics.names.inner, partitions)
    stored = store.read_inner_offsets(partitions)
    gaps = {p: (stored[p], starts[p]) for p in stored if stored[p] < starts.get(p, 0)}
    if gaps:
        log.error(
            "store_missed_inner_records",
            gaps={p: f"{s}..{e}" for p, (s, e) in gaps.items()},
            data_dir=str(settings.node.data_dir),
            action="cleared; rebuilding from the inner topic",
        )
        store.clear()
        stored = {}
    # No seek yet: nothing was delivered from this store, nor a cut applied to it. A rebuild
    # that did not finish (the node stopped meanwhile) is started again.
    fresh = store.read_seek() is None
    began = store.read_began_offsets(partitions)
    new = {p: (0 if p in stored else starts.get(p, 0)) for p in partitions if p not in began}
    compacted = settings.rebuild.mode == "compact"
    # On a compacted topic the live state is the whole topic: a restore reads it from its start.
    if new and fresh and floor is not None and not compacted:
        new = {p: max(o, floor.offsets.get(p, 0)) for p, o in new.items()}
        store.write_inner_offsets({p: o for p, o in new.items() if o > 0})
        log.info("store_begins_at_floor", began=new, topic_starts=starts)
    if new:
        store.write_began_offsets(new)
        began.update(new)
    return StoreOrigin(began, gaps, fresh, compacted)

"""A node alone's published progress: only cuts its persisted seek reached, repeats first."""

from __future__ import annotations

from pathlib import Path

from chronos.clock import FakeClock
from chronos.kafka.publishers.stub import StubPublisher
from chronos.model import DelayMessage
from chronos.node.cut_publisher import CutPublisher
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Claim, Cut, RepeatState, decode
from chronos.settings import DeleteSettings, StoreSettings
from chronos.store.rocks import RocksStore

T0 = 1_700_000_000_000
TOPIC = "ns.progress-alone.n1"


class _Publisher(StubPublisher):
    name = "stub"

    """The stub, as a component (the cut publisher starts and stops its own producer)."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def join(self, timeout: float) -> None:
        pass

    def is_alive(self) -> bool:
        return False


def _published(publisher: StubPublisher) -> list[Cut | RepeatState | Claim]:
    return [decode(r.key, r.value) for r in publisher.published]


def test_a_cut_is_published_once_the_persisted_seek_reached_its_frontier(tmp_path: Path) -> None:
    """Mutants caught: publishing the frontier's latest cut (ahead of the seek: a rebuilt store
    would take unacknowledged deliveries for done and lose them), and a repeat's next
    occurrence published after the cut that covers its delivery."""
    store = RocksStore(tmp_path, StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    ledger = Ledger(store, frontier, FakeClock(T0), DeleteSettings())
    with frontier.placing(None, {0: 7}):
        pass
    frontier.advance(T0 + 100)  # cut (T0 + 100, {0: 7}); nothing acknowledged yet
    floor = RebuildFloor()
    publisher = _Publisher(auto=True)
    cuts = CutPublisher(
        frontier=frontier,
        ledger=ledger,
        publisher=publisher,
        topic=TOPIC,
        node_id="n1",
        floor=floor,
        interval_s=1.0,
        clock=FakeClock(T0),
    )
    cuts.publish_once()
    assert publisher.published == [], "the seek has not reached any noted cut"
    ledger.commit_progress(T0 + 100, [])
    repeat = Repeat(RepeatKind.FIXED, interval_ms=1000, times=3)
    cuts.repeats_committed([(DelayMessage("r", "t", None, b"", [], T0, repeat, 2), T0 + 1000)])
    with frontier.placing(None, {0: 9}):
        pass
    frontier.advance(T0 + 200)  # noted next time, not reached by the seek
    cuts.publish_once()
    first = _published(publisher)
    assert [type(r) for r in first] == [RepeatState, Cut]
    cut = first[1]
    assert isinstance(cut, Cut) and (cut.seek_ms, cut.offsets, cut.term) == (T0 + 100, {0: 7}, 0)
    cuts.publish_once()
    assert len(publisher.published) == 2, "nothing changed: nothing published"
    floor.advance(Floor({0: 5}, T0))
    cuts.publish_once()
    again = _published(publisher)[-1]
    assert isinstance(again, Cut) and again.floor == Floor({0: 5}, T0) and again.seek_ms == T0 + 100
    ledger.commit_progress(T0 + 200, [])
    cuts.finish()  # a clean stop publishes the final seek
    last = _published(publisher)[-1]
    assert isinstance(last, Cut) and (last.seek_ms, last.offsets) == (T0 + 200, {0: 9})
    store.close()


def test_nothing_is_published_before_a_rebuild_applied_the_last_cut_nor_an_earlier_one(
    tmp_path: Path,
) -> None:
    """A store being rebuilt has a frontier of 0 until the published cut is applied. Mutant
    caught: that frontier published over the real cut (a crash during the rebuild would then
    deliver everything again)."""
    store = RocksStore(tmp_path, StoreSettings(wal_sync_interval_ms=60_000))
    frontier = Frontier(0)
    ledger = Ledger(store, frontier, FakeClock(T0), DeleteSettings())
    last = Cut(0, T0 + 500, {0: 40}, "n1", T0, Floor({0: 30}, T0))
    done = {"rebuilt": False}
    publisher = _Publisher(auto=True)
    cuts = CutPublisher(
        frontier=frontier,
        ledger=ledger,
        publisher=publisher,
        topic=TOPIC,
        node_id="n1",
        floor=RebuildFloor(last.floor),
        interval_s=1.0,
        clock=FakeClock(T0),
        published=last,
        ready=lambda: done["rebuilt"],
    )
    with frontier.placing(None, {0: 41}):
        pass
    cuts.publish_once()
    cuts.finish()
    assert publisher.published == [], "published while the rebuild had not applied its cut"
    done["rebuilt"] = True
    cuts.publish_once()
    assert publisher.published == [], "a frontier behind the published cut went out"
    frontier.reset(T0 + 500, {0: 41})
    ledger.commit_progress(T0 + 600, [])
    frontier.advance(T0 + 600)
    cuts.publish_once()
    cuts.publish_once()
    (cut,) = _published(publisher)
    assert isinstance(cut, Cut) and (cut.seek_ms, cut.offsets) == (T0 + 600, {0: 41})
    store.close()

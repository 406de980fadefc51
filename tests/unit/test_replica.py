"""Takeover and demotion of a replica against stubs: election, progress topic, publisher.

The store is a real RocksDB; the master loop is the real one over the stub publisher. Each
test names the mutant it was seen to catch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import structlog
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import FakeClock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.group import announcement
from chronos.group import replica as replica_module
from chronos.group.announcement import Announcement, Announcer
from chronos.group.lane import Lane, MasterState
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.replica import Elector, Replica
from chronos.group.spec import GroupSpec
from chronos.group.transactions import TransactionLoop
from chronos.kafka.errors import Fenced, NotAuthorized
from chronos.kafka.publisher import TransactionalPublisher
from chronos.kafka.publishers.stub import StubPublisher
from chronos.lifecycle import Fatal
from chronos.logs import configure_logging
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.node.refresh import RefreshWorker
from chronos.schedule.floor import Floor, RebuildFloor
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.origin import StoreOrigin
from chronos.schedule.progress_record import CUT_KEY, Cut, RepeatState
from chronos.schedule.progress_record import decode as decode_progress
from chronos.settings import (
    ChronosSettings,
    DeleteSettings,
    DeliverySettings,
    LogSettings,
    RebuildSettings,
    StoreSettings,
)
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore
from chronos.wire import H_ID

T0 = 1_700_000_000_000
TARGET = "orders"


@dataclass
class StubElection:
    """An election the test decides."""

    on_change: Callable[[bool], None]
    elected: bool = False
    started: bool = False

    def win(self) -> None:
        self.elected = True
        self.on_change(True)

    def lose(self) -> None:
        self.elected = False
        self.on_change(False)

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        pass

    def join(self, timeout: float) -> None:
        pass


@dataclass
class StubProgress:
    """The progress topic: committed records and the inner topic's ends, as Kafka would say."""

    events: list[str]
    records: list[Cut | RepeatState] = field(default_factory=list)
    inner_ends: dict[int, int] = field(default_factory=dict)
    end_reached: int = -1
    position: int = -1
    _read: int = 0

    def read(self, timeout_s: float) -> list[Cut | RepeatState]:
        self.events.append("read progress")
        out = self.records[self._read :]
        self._read = len(self.records)
        self.end_reached = len(self.records)
        if not out:
            time.sleep(min(timeout_s, 0.01))
        return out

    def skip_to(self, offset: int) -> None:
        self.events.append(f"skip to {offset}")

    def end_offset(self, timeout_s: float, topic: str | None = None, partition: int = 0) -> int:
        if topic:
            self.events.append("ask inner end")
            return self.inner_ends.get(partition, 0)
        return len(self.records)

    def close(self) -> None:
        pass


@dataclass
class World:
    """One replica and everything around it."""

    replica: Replica
    store: RocksStore
    ledger: Ledger
    spec: GroupSpec
    progress: StubProgress
    fatal: Fatal
    metrics: CountingMetrics
    publishers: list[StubPublisher]
    events: list[str]
    elections: list[StubElection]
    #: What the next publisher's ``init`` raises.
    init_errors: list[BaseException]
    #: Where refresh passes produce (not transactional).
    inner: StubPublisher
    #: What the replica announced of itself, in order.
    said: list[Announcement]
    clock: FakeClock
    offset: int = 0

    @property
    def election(self) -> StubElection:
        (election,) = self.elections
        return election

    def add(self, message_id: str, due_ms: int) -> None:
        message = DelayMessage(message_id, TARGET, b"k", b"v", [], due_ms)
        item = (Op.ADD, message_id, due_ms, codec.encode(message))
        self.ledger.apply_decoded([item], {0: self.offset + 1}, [(0, self.offset)])
        self.offset += 1
        self.progress.inner_ends[0] = self.offset

    def slot(self, message_id: str) -> int | None:
        key = keys.pending_key(self.store.get_index([message_id])[0])
        return None if key is None else keys.slot_of(key)

    def delivered(self) -> list[str]:
        records = [r for p in self.publishers for r in p.visible_on(TARGET)]
        return [(r.header(H_ID) or b"").decode() for r in records]

    def until(self, condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting until {what}"
            time.sleep(0.01)


@pytest.fixture
def pause(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """The replica's retry pause after a demotion, made an hour long and passed when the test
    says: "not before the pause" then holds however slow the machine, and nobody sleeps."""
    skipped = [0.0]
    real = time.monotonic
    monkeypatch.setattr(replica_module, "RETRY_S", 3600.0)
    clock = SimpleNamespace(monotonic=lambda: real() + skipped[0], sleep=time.sleep)
    monkeypatch.setattr(replica_module, "time", clock)

    def passed() -> None:
        skipped[0] += 3600.0

    return passed


@pytest.fixture
def hour_between_retakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RETAKE_EVERY_S`` made an hour: "not twice within the window" then holds however slow
    the machine. The replica's clock runs an hour ahead too, so its first retake is allowed
    whether ``world`` built it before this fixture (``_retook_at`` -30 s) or after (-1 h),
    on a machine up for less than an hour as well."""
    monkeypatch.setattr(replica_module, "RETAKE_EVERY_S", 3600.0)
    real = time.monotonic
    clock = SimpleNamespace(monotonic=lambda: real() + 3600.0, sleep=time.sleep)
    monkeypatch.setattr(replica_module, "time", clock)


@pytest.fixture
def origin() -> StoreOrigin:
    """Where the store's ingest began: from the topic's first record unless a test says."""
    return StoreOrigin({0: 0})


@pytest.fixture
def world(tmp_path: Path, origin: StoreOrigin) -> Iterator[World]:
    settings = ChronosSettings.model_validate(
        {
            "node": {"node_id": "b"},
            "topics": {"namespace": "ns"},
            "group": {
                "name": "g",
                "transaction_interval_ms": 0,
                "progress_interval_ms": 10,
                "takeover_catch_up_s": 0.5,
            },
        }
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    store = RocksStore(tmp_path, StoreSettings(wal_sync_interval_ms=60_000))
    clock, metrics, fatal = FakeClock(T0), CountingMetrics(), Fatal()
    frontier = Frontier(0)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, clock, DeleteSettings(), placement)
    replica_store = ReplicaStore(store, frontier, ledger, placement)
    events: list[str] = []
    progress = StubProgress(events)
    publishers: list[StubPublisher] = []
    elections: list[StubElection] = []
    init_errors: list[BaseException] = []

    def open_election(on_change: Callable[[bool], None]) -> Elector:
        elections.append(StubElection(on_change))
        return elections[-1]

    def open_publisher() -> TransactionalPublisher:
        publisher = StubPublisher(
            topics={TARGET, spec.dead_letter_topic, spec.progress_topic}, placed=True
        )
        if init_errors:
            publisher.fail_next("init", init_errors.pop(0))
        original_init = publisher.init

        def init(timeout_s: float) -> None:
            events.append("init")
            original_init(timeout_s)

        publisher.init = init  # type: ignore[method-assign]
        publishers.append(publisher)
        return publisher

    def new_master(publisher: TransactionalPublisher, state: MasterState) -> TransactionLoop:
        retry = DeliverySettings(retry_backoff_initial_ms=1, retry_backoff_max_ms=1)
        lane = Lane(
            progress_topic=spec.progress_topic,
            store=store,
            ledger=ledger,
            replica=replica_store,
            frontier=frontier,
            state=state,
            policy=DeadLetterPolicy.of(retry, publisher),
            clock=clock,
        )
        return TransactionLoop(
            spec=spec, publisher=publisher, lanes=[lane], retry=retry, clock=clock, metrics=metrics
        )

    inner = StubPublisher(topics={spec.inner_topic}, auto=True)
    said: list[Announcement] = []

    def announce(key: bytes, value: bytes) -> None:
        decoded = announcement.decode(key, value)
        assert decoded is not None
        said.append(decoded)

    def new_refresher(floor: RebuildFloor) -> RefreshWorker:
        return RefreshWorker(
            store=store,
            inner_offsets=lambda: ledger.inner_offsets([0]),
            open_publisher=lambda: inner,
            inner_topic=spec.inner_topic,
            floor=floor,
            settings=RebuildSettings(),
            clock=clock,
            metrics=metrics,
        )

    replica = Replica(
        spec=spec,
        partitions=[0],
        store=replica_store,
        open_election=open_election,
        progress=progress,
        open_publisher=open_publisher,
        new_master=new_master,
        new_refresher=new_refresher,
        origin=origin,
        ingest_ready=lambda: True,
        fatal=fatal,
        clock=clock,
        metrics=metrics,
        announcer=Announcer("b", announce, clock, 5.0),
    )
    w = World(
        replica,
        store,
        ledger,
        spec,
        progress,
        fatal,
        metrics,
        publishers,
        events,
        elections,
        init_errors,
        inner,
        said,
        clock,
    )
    replica_store.follow()
    yield w
    w.replica.stop()
    w.replica.finish()
    store.close()


def test_takeover_fences_first_then_leads_from_the_committed_cut_with_the_next_term(
    world: World,
) -> None:
    """Mutants caught: the new master ignoring the committed cut (not applying it, leading
    from its own store's seek: ``covered`` delivered twice); the uncovered add not relocated
    (never delivered: it sits behind the seek); the term not incremented (the same term
    twice); the progress read before ``init`` fenced the old master."""
    world.add("covered", T0 - 500)  # offset 0: the old master delivered it
    world.add("uncovered", T0 - 400)  # offset 1: past the cut, never delivered
    world.add("ahead", T0 + 60_000)  # offset 2: not due
    world.progress.records.append(Cut(4, T0 - 100, {0: 1}, "a", T0 - 100))
    world.election.win()
    world.replica.step()
    assert world.replica.role == "master" and world.replica.term == 5
    assert world.events[0] == "init", "the old master must be fenced before progress is read"
    assert world.slot("uncovered") == T0 - 99  # relocated past the cut's seek
    world.until(lambda: "uncovered" in world.delivered(), "the uncovered add is delivered")
    # A positive signal before "nothing else": an add due later is delivered after
    # ``covered`` would have been (slot order).
    world.add("later", T0 - 50)
    world.clock.advance(100)  # placed after the frontier (now): due once the clock moves
    world.until(lambda: "later" in world.delivered(), "a later add is delivered")
    assert world.delivered() == ["uncovered", "later"]
    assert world.metrics.totals()["promotions"] == 1


def test_a_takeover_waits_for_ingest_to_cover_the_cut(world: World) -> None:
    """Ingest behind the committed cut: the takeover gives up (bounded) and stays a backup
    rather than deliver from a store that lacks adds the cut covers."""
    world.progress.records.append(Cut(2, T0, {0: 5}, "a", T0))
    world.progress.inner_ends[0] = 5
    world.election.win()
    world.replica.step()
    assert world.replica.role == "backup" and world.publishers[0].closed


def test_a_fenced_master_turns_into_a_backup_that_follows_and_tries_again_later(
    world: World, pause: Callable[[], None]
) -> None:
    """Mutant caught: ``master.fenced`` ignored by the controller (a zombie that never
    demotes, and never follows the new master's progress)."""
    world.election.win()
    world.replica.step()
    assert world.replica.role == "master"
    first = world.publishers[0]
    world.progress.records.append(Cut(8, T0 - 20, {}, "a", T0))  # the new master committed
    first.fail_next("begin", Fenced("PRODUCER_FENCED: a new master"))
    world.add("m", T0 - 10)
    world.until(lambda: world.metrics.totals().get("fenced", 0) == 1, "the loop saw the fencing")
    world.replica.step()
    assert world.replica.role == "backup" and first.closed
    assert world.metrics.totals()["demotions"] == 1
    # It follows: a cut committed by the new master reaches its store.
    world.progress.records.append(Cut(9, T0 + 50, {0: 1}, "a", T0))
    world.until(lambda: world.ledger.seek_ms == T0 + 50, "the backup applied the new cut")
    world.replica.step()
    assert world.events.count("init") == 1, "took over again before the retry pause"
    pause()
    world.replica.step()
    assert world.replica.role == "master" and world.replica.term == 10


def test_an_elected_master_whose_producer_broke_alone_takes_over_again_at_once(
    world: World,
) -> None:
    """A broker restart breaks every master's transaction (``INVALID_TXN_STATE``): nobody
    fenced them. Mutant caught: the usual demotion (a ``RETRY_S`` pause, then a silence),
    which left the partition undelivered for seconds after the broker was back."""
    world.election.win()
    world.replica.step()
    first = world.publishers[0]
    # Its first transaction committed before the broker "restarts" (on a loaded machine the
    # loop had not begun one yet when the failure was set: no cut of its own to skip to).
    world.until(lambda: "commit" in first.calls, "the first term commits")
    first.fail_next("begin", Fenced("INVALID_TXN_STATE: broke"))
    world.add("m", T0 - 10)
    world.until(lambda: world.metrics.totals().get("fenced", 0) == 1, "the loop saw it break")
    world.replica.step()
    assert world.replica.role == "master" and first.closed
    assert world.events.count("init") == 2
    assert world.metrics.totals()["retakes"] == 1
    # It read the progress topic from its own last committed cut on, not from its start.
    progress = [r for r in first.published if r.topic == world.spec.progress_topic]
    cut_offsets = [n for n, r in enumerate(progress) if r.key == CUT_KEY and r.transaction]
    assert f"skip to {max(o for o in cut_offsets if progress[o].answered)}" in world.events
    world.until(lambda: "commit" in world.publishers[1].calls, "the new term commits")


def test_a_master_retakes_at_most_once_per_retake_interval(
    hour_between_retakes: None, world: World
) -> None:
    """Mutants caught: retaking again and again (a producer that keeps breaking must let a
    standby lead), and retaking after a fencing by another producer (a back and forth)."""
    world.election.win()
    world.replica.step()

    def break_master(error: Fenced) -> None:
        fenced = world.metrics.totals().get("fenced", 0)
        world.publishers[-1].fail_next("begin", error)
        world.add(f"m{fenced}", T0 - 10)
        world.until(lambda: world.metrics.totals().get("fenced", 0) == fenced + 1, "broken")
        world.replica.step()

    break_master(Fenced("INVALID_TXN_STATE: broke"))
    assert world.replica.role == "master" and world.events.count("init") == 2
    break_master(Fenced("PRODUCER_FENCED: broke again"))
    assert world.replica.role == "backup", "retook twice within RETAKE_EVERY_S"
    assert world.events.count("init") == 2


def test_a_master_fenced_by_another_does_not_retake(world: World) -> None:
    """Mutant caught: retaking when the progress topic shows another master committed (a
    thawed zombie fencing its live successor)."""
    world.election.win()
    world.replica.step()
    world.add("a", T0 - 10)
    world.progress.records.append(Cut(7, T0 - 20, {0: 1}, "a", T0))
    world.publishers[0].fail_next("begin", Fenced("PRODUCER_FENCED: a new master"))
    world.until(lambda: world.metrics.totals().get("fenced", 0) == 1, "fenced")
    world.replica.step()
    assert world.replica.role == "backup" and world.events.count("init") == 1
    assert "retakes" not in world.metrics.totals()


def test_a_master_of_the_election_that_lost_it_does_not_retake(world: World) -> None:
    """Mutant caught: retaking without checking the election (the new owner leads)."""
    world.election.win()
    world.replica.step()
    world.election.elected = False  # lost, and the replica not told yet
    world.publishers[0].fail_next("begin", Fenced("INVALID_TXN_STATE: broke"))
    world.add("b", T0 - 5)
    world.until(lambda: world.metrics.totals().get("fenced", 0) == 1, "broken")
    world.replica.step()
    assert world.replica.role == "backup" and world.events.count("init") == 1
    assert "retakes" not in world.metrics.totals()


def test_a_demotion_completes_when_closing_the_fenced_producer_raises(world: World) -> None:
    """A fenced librdkafka producer's ``poll`` raises its fatal error when closed. Mutant
    caught: that error escaping the demotion, which left the zombie a "master" that neither
    delivered nor followed (found by ``scripts/failover_check.py --scenario zombie``)."""
    world.election.win()
    world.replica.step()
    first = world.publishers[0]
    first.fail_next("close", KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    world.election.lose()
    world.replica.step()
    assert world.replica.role == "backup" and first.closed
    world.progress.records.append(Cut(9, T0 + 50, {}, "a", T0))
    world.until(lambda: world.ledger.seek_ms == T0 + 50, "the backup follows the new master")


def test_a_master_that_lost_the_election_stops_delivering(
    world: World, pause: Callable[[], None]
) -> None:
    world.election.win()
    world.replica.step()
    world.election.lose()
    world.replica.step()
    assert world.replica.role == "backup" and world.publishers[0].closed
    world.add("m", T0 - 10)
    # A positive signal before "nothing": elected again, the next term delivers it.
    world.clock.advance(100)  # placed after the frontier (now): due once the clock moves
    world.election.win()
    pause()
    world.replica.step()
    assert world.replica.role == "master", world.events
    world.until(lambda: "m" in world.delivered(), "the next term delivered m")
    assert world.publishers[0].visible_on(TARGET) == []


def test_refused_credentials_at_takeover_end_the_node_without_retrying(
    world: World, pause: Callable[[], None]
) -> None:
    """Mutant caught: NotAuthorized from ``init`` handled like any failed takeover (retried
    every second for ever, the node never exiting)."""
    refused = NotAuthorized("init_transactions", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    world.init_errors.append(refused)
    world.election.win()
    world.replica.step()
    assert world.fatal.reason is not None
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in world.fatal.reason
    pause()
    world.replica.step()
    assert world.events.count("init") == 1 and world.replica.role == "backup"


@pytest.mark.parametrize("origin", [StoreOrigin({0: 5})])
def test_a_store_rebuilt_from_a_trimmed_topic_stands_only_once_a_floor_covers_it(
    world: World,
) -> None:
    """Ingest began at offset 5 (retention had removed 0-4): messages only recorded there
    may be missing until a refresh pass re-appended them at or above 5. Mutant caught: the
    replica joining the election at once (it would lead with a store that lacks them).
    Each "not yet" is asserted after the replica said it judged the floor it was given."""

    def judged(floor: dict[str, int] | None) -> bool:
        said = world.said[-1] if world.said else None
        return said is not None and said.state == "incomplete" and said.detail["floor"] == floor

    world.replica.start()  # follows the progress topic and steps on its own thread
    world.until(lambda: judged(None), "incomplete said without a floor")
    assert not world.election.started and not world.replica.complete
    world.progress.records.append(Cut(3, T0, {}, "a", T0, Floor({0: 4}, T0 - 10)))
    world.until(lambda: judged({"0": 4}), "the floor below where ingest began judged")
    assert not world.election.started, "a floor below where ingest began proves nothing"
    world.progress.records.append(Cut(3, T0, {}, "a", T0, Floor({0: 5}, T0)))
    world.until(lambda: world.election.started, "the floor reaches where ingest began")
    assert world.replica.complete
    world.replica.stop()
    world.replica.join(5.0)


@pytest.mark.parametrize("origin", [StoreOrigin({0: 5})])
def test_a_rebuilt_store_says_restoring_until_the_progress_topic_was_read_then_incomplete(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replaced disk is restoring while the floor that covers it may still be unread: only
    once the progress topic was read to its end without such a floor is it incomplete (the
    error operators alert on). Then eligible once a floor covers it. Mutants caught: the
    error logged before the progress topic was read (every healthy replacement logged it
    once); the states not announced (``chronos group`` could not list the replica)."""
    configure_logging(LogSettings())
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(replica_module, "log", structlog.get_logger(replica_module.__name__))
        world.replica.step()  # nothing read from the progress topic yet
    assert [e["event"] for e in logs] == ["replica_restoring"]
    assert [(a.state, a.detail["waits_for"]) for a in world.said] == [
        (announcement.RESTORING, "progress topic")
    ]
    world.replica.start()  # the follow worker reads the (empty) progress topic to its end
    world.until(lambda: world.said[-1].state == announcement.INCOMPLETE, "incomplete said")
    assert world.said[-1].detail == {"began": {"0": 5}, "floor": None}  # JSON: string keys
    world.progress.records.append(Cut(3, T0, {}, "a", T0, Floor({0: 5}, T0)))
    world.until(lambda: world.said[-1].state == announcement.ELIGIBLE, "eligible said")
    assert world.election.started
    world.replica.stop()
    world.replica.join(5.0)
    assert world.said[-1].state == announcement.STOPPED


def test_a_master_refreshes_what_its_store_holds_and_publishes_the_floor(world: World) -> None:
    """No floor yet: the new master's first pass runs at once, re-appends the held message
    with its slot, and the next progress record carries the offsets ingested when the pass
    began. Mutant caught: the floor never reaching the progress records."""
    world.add("ahead", T0 + 60_000)
    world.election.win()
    world.replica.step()
    assert world.replica.role == "master"
    world.until(lambda: len(world.inner.published) == 1, "the held message is refreshed")
    (refresh,) = world.inner.published
    assert refresh.key == b"ahead" and refresh.header("chronos-slot-ms") == b"%d" % (T0 + 60_000)

    def published_floor() -> Floor | None:
        cuts = [
            record
            for p in world.publishers
            for record in p.visible_on(world.spec.progress_topic)
            if record.key == b"cut"
        ]
        return decode_progress(cuts[-1].key, cuts[-1].value).floor if cuts else None  # type: ignore[union-attr]

    world.until(lambda: published_floor() is not None, "a progress record carries the floor")
    floor = published_floor()
    assert floor is not None and floor.offsets == {0: 1}


@dataclass
class ScriptedWatch:
    """A failure detector whose verdicts the test sets."""

    suspicious: bool = False
    silent: bool = False
    blind_s: float = 0.0
    observed: int = 0
    silent_s: float = 2.0

    def observe(self) -> None:
        self.observed += 1

    def suspects(self) -> bool:
        return self.suspicious

    def quiet(self) -> bool:
        return self.silent

    def reset(self) -> None:
        self.suspicious = self.silent = False


def _a_master_committed(world: World, term: int) -> None:
    cut = Cut(term, T0 - 100, {0: 0}, "a", T0 - 100)
    world.progress.records.append(cut)
    world.replica._follower.take([cut])  # what the follow worker does on its thread
    assert world.replica.term == term


def test_a_backup_takes_over_on_suspicion_without_the_election(world: World) -> None:
    """The master stopped committing: the backup fences it and leads before the election's
    session expires; losing an election it never held does not demote it. Mutants caught: the
    suspicion ignored (no takeover until elected); the takeover aborted because the backup does
    not hold the election partition; a suspicion acted on in a group where no master ever
    committed (the election picks the first)."""
    watch = ScriptedWatch(suspicious=True)
    world.replica._watch = watch  # type: ignore[assignment]
    world.replica.step()
    assert world.replica.role == "backup" and watch.observed == 1, "no master ever committed"
    _a_master_committed(world, 3)
    world.replica.step()
    assert world.replica.role == "master" and world.replica.term == 4
    assert world.events[0] == "init"
    world.replica.step()  # not elected, never was: stays master
    assert world.replica.role == "master"
    world.election.win()  # the dead master's session expired
    world.replica.step()
    world.election.lose()
    world.replica.step()
    assert world.replica.role == "backup"


def test_holding_the_partition_is_no_reason_to_fence_a_committing_master(world: World) -> None:
    """A thawed zombie, or a node just started, holds the election partition while another
    node commits: it must not take the role (a needless handover) until the progress topic
    stood still, seen or not seen moving before, and it read the progress topic to its end.
    Mutants caught: the elected path ignoring the watch; acting on a silence while still
    reading (a restarted node let a handover to it pass and waited out the silence after it)."""
    watch = ScriptedWatch()
    world.replica._watch = watch  # type: ignore[assignment]
    _a_master_committed(world, 3)
    world.election.win()
    world.replica.step()
    world.replica.step()
    assert world.replica.role == "backup" and "init" not in world.events
    watch.silent = True  # that master died, or a takeover was killed before its first commit
    world.replica.step()
    assert world.replica.role == "backup", "led before reading the progress topic to its end"
    world.replica._follower.take([], end_reached=True)
    world.replica.step()
    assert world.replica.role == "master" and world.replica.term == 4


def test_an_elected_replica_leads_at_once_in_a_new_group_or_when_the_watch_is_blind(
    world: World,
) -> None:
    """Mutants caught: the first master of a new group waiting for a silence; a watch Kafka
    never answers keeping the elected replica a backup for ever; "no master ever committed"
    concluded before the progress topic was read to its end (a restarted node fenced the live
    owner that was about to hand it the partition)."""
    watch = ScriptedWatch()
    world.replica._watch = watch  # type: ignore[assignment]
    world.election.win()
    world.replica.step()
    assert world.replica.role == "backup", "led before knowing whether a master committed"
    world.replica._follower.take([], end_reached=True)
    world.replica.step()
    assert world.replica.role == "master", "no master ever committed: the election decides"
    world.election.lose()
    world.replica.step()
    assert world.replica.role == "backup"
    _a_master_committed(world, 5)
    world.replica._retry_at = 0.0
    world.election.win()
    world.replica.step()
    assert world.replica.role == "backup"
    watch.blind_s = world.spec.settings.session_timeout_ms / 1000.0
    world.replica.step()
    assert world.replica.role == "master"


def test_a_cut_released_to_this_replica_is_taken_over_at_once_and_others_wait(
    world: World,
) -> None:
    """A graceful handover: the last master's final cut names its successor, which takes over
    without waiting for the progress topic to stand still; a replica it does not name waits.
    Mutants caught: the release ignored (a silence waited out); any replica taking over on a
    release naming another; one acted on before the topic was read to its end (a restarted
    replica passing an old handover to it fenced a live master); a takeover on a handover
    waiting for ingest to reach the inner topic's end (the cancel gate holds what it did not
    cover; the wait was a handover's largest step)."""
    watch = ScriptedWatch()
    world.replica._watch = watch  # type: ignore[assignment]
    other = Cut(3, T0 - 100, {0: 0}, "a", T0 - 100, released_to="c")
    world.progress.records.append(other)
    world.replica._follower.take([other])
    world.replica.step()
    assert world.replica.role == "backup"
    mine = Cut(4, T0 - 50, {0: 0}, "c", T0 - 50, released_to="b")
    world.progress.records.append(mine)
    world.replica._follower.take([mine])
    world.replica.step()
    assert world.replica.role == "backup", "acted on a handover before reading to the end"
    world.replica._follower.take([], end_reached=True)
    world.replica.step()
    assert world.replica.role == "master" and world.replica.term == 5
    assert "ask inner end" not in world.events, "a handover waited for ingest's end"


@pytest.mark.usefixtures("pause")  # no retake however slow the machine
def test_a_master_asked_to_hand_over_commits_a_last_cut_naming_its_successor_then_follows(
    world: World,
) -> None:
    """Mutants caught: the handover cut not naming the successor (it would wait out a silence);
    the master delivering on after it; ``handed_over`` never set (a leaving node waits for its
    whole timeout)."""
    world.add("due", T0 - 10)
    world.election.win()
    world.replica.step()
    assert world.replica.role == "master"
    world.until(lambda: world.delivered() == ["due"], "the master delivered")
    world.replica.hand_over("c")

    def handed_over() -> bool:
        world.replica.step()
        return world.replica.role == "backup"

    world.until(handed_over, "it handed over")
    assert world.replica.handed_over.is_set()
    cuts = [
        r
        for p in world.publishers
        for r in p.visible_on(world.spec.progress_topic)
        if r.key == CUT_KEY
    ]
    last = decode_progress(cuts[-1].key, cuts[-1].value)
    assert isinstance(last, Cut) and last.released_to == "c" and last.term == 1
    world.add("after", T0 - 5)
    world.replica.step()
    assert "after" not in world.delivered()


def test_a_backup_keeps_its_next_producer_connected_and_takes_over_with_it(world: World) -> None:
    """A producer made at the takeover waits for its connection inside ``init_transactions``
    (measured 60-520 ms against 5-20 ms warm): a standing backup makes it beforehand and has
    it ask Kafka something, without fencing anyone. Mutant caught: the takeover opening a
    new producer instead."""
    watch = ScriptedWatch()
    world.replica._watch = watch  # type: ignore[assignment]
    _a_master_committed(world, 3)
    world.replica.step()
    assert world.replica.role == "backup" and "init" not in world.events
    assert len(world.publishers) == 1
    spare = world.publishers[0]
    assert spare.asked == [world.spec.progress_topic] and spare.calls == []
    watch.suspicious = True  # the master fell silent
    world.replica.step()
    assert world.replica.role == "master" and world.replica.term == 4
    assert spare.calls[:1] == ["init"] and len(world.publishers) == 1


def test_a_stopped_backup_closes_its_spare_producer(world: World) -> None:
    """Mutant caught: the spare left open when the replica stops (its threads and
    connections live on in a node that stopped the partition, e.g. a cluster moving it)."""
    _a_master_committed(world, 3)
    world.replica.start()
    world.until(lambda: len(world.publishers) == 1, "the backup made its spare")
    world.replica.stop()
    world.replica.join(5.0)
    assert world.publishers[0].closed and world.publishers[0].calls == ["close"]


@pytest.mark.usefixtures("pause")  # no retake however slow the machine
def test_a_takeover_whose_fencing_failed_follows_the_group_again(world: World) -> None:
    """The follow worker is told to stop before the fencing and waited for after it. Mutant
    caught: a failed ``init_transactions`` leaving the stopped worker in place, so the backup
    never follows again (its store misses every later cut and it could never stand)."""
    world.init_errors.append(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    world.replica.start()
    world.election.win()
    world.until(lambda: world.events.count("init") == 1, "the takeover tried to fence")
    world.election.lose()  # no second takeover: only following moves the store now
    world.until(lambda: world.replica._retry_at > 0, "the takeover failed")
    world.progress.records.append(Cut(9, T0 + 50, {}, "a", T0))
    world.until(lambda: world.ledger.seek_ms == T0 + 50, "the backup follows the group again")
    assert world.events.count("init") == 1 and world.replica.role == "backup"
    world.replica.stop()
    world.replica.join(5.0)

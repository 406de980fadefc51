"""One transaction loop over several partitions (lanes), as a cluster node of the second shape
delivers every partition it owns through one producer (issue 61, step 5 a): the stub publisher
and one RocksDB holding a schedule per partition.

Each test names the mutant it was seen to catch (the code changed, the test failed, the change
undone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import FakeClock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.group.lane import Lane, MasterState
from chronos.group.node_log import NodeLog
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.group.transactions import TransactionLoop
from chronos.kafka.errors import Fenced
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.repeat import Repeat, RepeatKind
from chronos.schedule.cancel_gate import CancelGate
from chronos.schedule.frontier import Frontier, Wake
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut, RepeatState, decode, decode_node_cut
from chronos.settings import ChronosSettings, DeleteSettings, DeliverySettings, StoreSettings
from chronos.store import codec
from chronos.store.database import RocksDatabase
from chronos.store.rocks import RocksStore
from chronos.wire import H_DLQ_REASON, H_ID
from tests.waiting import wait_until

T0 = 1_700_000_000_000
TARGET = "orders"
NODE_LOG = NodeLog("ns.progress.c.nodes", 3)
RETRY = DeliverySettings(retry_backoff_initial_ms=1, retry_backoff_max_ms=1, give_up_after_s=5)
FAST = StoreSettings(wal_sync_interval_ms=60_000)


def progress_topic(partition: int) -> str:
    return f"ns.progress.c.p{partition}"


@dataclass
class Partition:
    """One partition's schedule and what its lane's callbacks heard."""

    number: int
    store: RocksStore
    ledger: Ledger
    lane: Lane
    fenced: list[str] = field(default_factory=list)
    offset: int = 0

    def add(self, message_id: str, due_ms: int, repeat: Repeat | None = None) -> None:
        message = DelayMessage(message_id, TARGET, b"k", b"v", [], due_ms, repeat)
        item = (Op.ADD, message_id, due_ms, codec.encode(message))
        p = self.number
        self.ledger.apply_decoded([item], {p: self.offset + 1}, [(p, self.offset)])
        self.offset += 1


@dataclass
class Node:
    """A node delivering several partitions through one publisher."""

    database: RocksDatabase
    publisher: StubPublisher
    clock: FakeClock
    metrics: CountingMetrics
    spec: GroupSpec
    wake: Wake
    partitions: dict[int, Partition]
    loop: TransactionLoop

    def delivered(self) -> list[str]:
        return [(r.header(H_ID) or b"").decode() for r in self.publisher.visible_on(TARGET)]

    def cuts(self, partition: int) -> list[Cut]:
        records = self.publisher.visible_on(progress_topic(partition))
        return [c for c in (decode(r.key, r.value) for r in records) if isinstance(c, Cut)]

    def node_cuts(self) -> list[tuple[int | None, int, Cut]]:
        """(partition of the node-log topic, partition delivered, cut) of each record there."""
        records = self.publisher.visible_on(NODE_LOG.topic)
        return [(r.partition, *decode_node_cut(r.key, r.value)) for r in records]

    def lane(self, partition: int, term: int, gate: CancelGate | None = None) -> Partition:
        """A partition's schedule and a lane over it, leading from ``T0 - 1000``, held by
        ``gate`` (None: none)."""
        store = RocksStore.of_partition(self.database, partition)
        frontier = Frontier(0, self.wake)
        placement = ReplicaPlacement()
        ledger = Ledger(store, frontier, self.clock, DeleteSettings(), placement)
        replica = ReplicaStore(store, frontier, ledger, placement)
        replica.lead(T0 - 1000, [partition])
        fenced: list[str] = []
        publisher = self.publisher
        lane = Lane(
            progress_topic=progress_topic(partition),
            store=store,
            ledger=ledger,
            replica=replica,
            frontier=frontier,
            state=MasterState(term, fenced.append, fenced.append),
            policy=DeadLetterPolicy(RETRY, lambda t: publisher.topic_exists(t, 1.0)),
            clock=self.clock,
            partition=partition,
            cancel_gate=gate,
        )
        made = Partition(partition, store, ledger, lane, fenced)
        self.partitions[partition] = made
        return made


def make_node(
    tmp_path: Path,
    terms: dict[int, int],
    progress_interval_ms: int = 60_000,
    idle_cuts: bool = True,
    wake: Wake | None = None,
    node_log: NodeLog | None = None,
    fence_check_s: float | None = None,
) -> Node:
    """A node owning ``terms``' partitions (partition -> its term); an idle lane publishes
    its cut every ``progress_interval_ms`` when ``idle_cuts``."""
    settings = ChronosSettings.model_validate(
        {
            "topics": {"namespace": "ns"},
            "group": {
                "name": "c",
                "transaction_interval_ms": 0,
                "progress_interval_ms": progress_interval_ms,
                "suspect_after_ms": 3 * progress_interval_ms,
            },
        }
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    topics = {TARGET, spec.dead_letter_topic, NODE_LOG.topic}
    topics |= {progress_topic(p) for p in range(8)}
    publisher = StubPublisher(topics=topics)
    clock, metrics = FakeClock(T0), CountingMetrics()
    database = RocksDatabase(tmp_path / "s", FAST)
    wake = wake or Wake()
    node = Node(database, publisher, clock, metrics, spec, wake, {}, None)  # type: ignore[arg-type]
    lanes = [node.lane(p, term).lane for p, term in terms.items()]
    node.loop = TransactionLoop(
        spec=spec,
        publisher=publisher,
        lanes=lanes,
        retry=RETRY,
        clock=clock,
        metrics=metrics,
        idle_cuts=idle_cuts,
        node_log=node_log,
        wake=wake,
        fence_check_s=fence_check_s,
    )
    return node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = make_node(tmp_path, {1: 4, 2: 9})
    yield made
    for partition in made.partitions.values():
        partition.store.close()
    made.database.close()


def test_every_lane_delivers_in_one_transaction_with_its_own_cut(node: Node) -> None:
    """Mutants caught: every cut to the first lane's progress topic; the first lane's term in
    every cut; a lane's store left where it was (only the first lane's cut applied)."""
    p1, p2 = node.partitions[1], node.partitions[2]
    p1.add("a", T0 - 10)
    p2.add("b", T0 - 5)
    p2.add("c", T0 - 4)
    p1.add("later", T0 + 5000)
    node.loop.step()
    assert node.publisher.calls == ["begin", "commit"]
    assert sorted(node.delivered()) == ["a", "b", "c"]
    (cut1,) = node.cuts(1)
    (cut2,) = node.cuts(2)
    assert (cut1.term, cut1.seek_ms, cut1.offsets) == (4, T0, {1: 2})
    assert (cut2.term, cut2.seek_ms, cut2.offsets) == (9, T0, {2: 2})
    assert p1.ledger.seek_ms == T0 and p2.ledger.seek_ms == T0


def test_an_idle_lane_publishes_no_cut_until_its_heartbeat(tmp_path: Path) -> None:
    """A partition with nothing due writes nothing in the other lanes' transactions, and its
    cut once per ``progress_interval_ms``. Mutant caught: every lane in every transaction."""
    node = make_node(tmp_path, {1: 1, 2: 1}, progress_interval_ms=200)
    p1 = node.partitions[1]
    node.loop.step()  # the first transaction publishes both lanes' cuts
    assert (len(node.cuts(1)), len(node.cuts(2))) == (1, 1)
    p1.add("a", T0 + 10)
    node.clock.advance(20)
    node.loop.step()
    assert node.delivered() == ["a"]
    assert (len(node.cuts(1)), len(node.cuts(2))) == (2, 1)
    beat = node.metrics.totals()["transactions"]
    give_up = time.monotonic() + 30
    while len(node.cuts(2)) == 1:  # lane 2's heartbeat is due within 200 ms of real time
        assert time.monotonic() < give_up, "lane 2's heartbeat cut never came"
        node.loop.step()
    assert node.metrics.totals()["transactions"] > beat


def test_without_idle_cuts_an_idle_lane_writes_only_its_first_cut(tmp_path: Path) -> None:
    """A cluster node's lanes (``idle_cuts=False``): its heartbeat is its sign of life, so an
    idle partition costs the broker nothing after its first cut. Mutant caught: idle cuts
    whatever the setting."""
    node = make_node(tmp_path, {1: 1, 2: 1}, progress_interval_ms=100, idle_cuts=False)
    node.loop.step()
    assert (len(node.cuts(1)), len(node.cuts(2))) == (1, 1), "each lane's first cut at once"
    passed = time.monotonic() + 0.3  # three progress intervals, waited by the loop's steps
    n = 0
    while time.monotonic() < passed:
        node.partitions[1].add(f"a{n}", T0 + n)
        node.clock.advance(1)
        node.loop.step()
        n += 1
    assert len(node.cuts(1)) == n + 1 and len(node.cuts(2)) == 1


def test_an_idle_loop_commits_one_lane_s_cut_per_fence_check_and_so_learns_of_a_fence(
    tmp_path: Path,
) -> None:
    """A member fenced while its lanes are idle learns it only from a transaction: once the
    loop committed nothing for ``fence_check_s`` it commits the longest-idle lane's cut (one
    lane, not all: the cost is the node's, not its partitions'). Mutants caught: no check
    (the fence never seen), every lane's cut, always the same lane."""
    node = make_node(tmp_path, {1: 1, 2: 1}, idle_cuts=False, fence_check_s=0.05)
    node.loop.step()
    assert (len(node.cuts(1)), len(node.cuts(2))) == (1, 1)
    commits = node.loop.commits
    wait_until(lambda: time.monotonic() - node.loop.lanes[0].last_commit > 0.05, 10, "a period")
    node.loop.step()
    assert node.loop.commits == commits + 1
    assert (len(node.cuts(1)), len(node.cuts(2))) == (2, 1)
    wait_until(lambda: time.monotonic() - node.loop.lanes[0].last_commit > 0.05, 10, "a period")
    node.loop.step()
    assert (len(node.cuts(1)), len(node.cuts(2))) == (2, 2), "the longest idle lane next"
    wait_until(lambda: time.monotonic() - node.loop.lanes[1].last_commit > 0.05, 10, "a period")
    node.publisher.fail_next("commit", Fenced("PRODUCER_FENCED"))
    node.loop.step()
    assert node.loop.fenced is not None
    assert node.partitions[1].fenced and node.partitions[2].fenced


def test_a_record_refused_in_one_lane_aborts_every_lane_and_the_redo_delivers_each_once(
    node: Node,
) -> None:
    """One transaction, one outcome: lane 2's refused record aborts lane 1's delivery too; the
    redo follows at once, dead-letters it and delivers the rest once. Mutants caught: the
    failures of lanes after the first not judged (an abort loop); the redo waiting a backoff
    (only the first lane's verdict counted)."""
    node.publisher.outcome = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        if r.topic == TARGET and r.header(H_ID) == b"huge"
        else None
    )
    node.partitions[1].add("a", T0 - 10)
    node.partitions[2].add("huge", T0 - 10)
    node.partitions[2].add("b", T0 - 9)
    node.loop.step()
    assert node.publisher.calls == ["begin", "abort"]
    assert node.metrics.totals().get("transactions_redone") == 1
    node.loop.step()
    assert node.publisher.calls == ["begin", "abort", "begin", "commit"]
    assert sorted(node.delivered()) == ["a", "b"]
    (dead,) = node.publisher.visible_on(node.spec.dead_letter_topic)
    assert dead.header(H_ID) == b"huge"
    assert (dead.header(H_DLQ_REASON) or b"").startswith(b"MSG_SIZE_TOO_LARGE")
    assert [c.seek_ms for c in node.cuts(1)] == [T0] and [c.seek_ms for c in node.cuts(2)] == [T0]


def test_a_released_lane_names_its_successor_once_and_the_others_go_on(node: Node) -> None:
    """Mutants caught: the loop released whole when one lane is (the other stops delivering);
    the released lane left in later transactions (a second owner's cuts after the handover)."""
    p1, p2 = node.partitions[1], node.partitions[2]
    p1.add("a", T0 - 10)
    p1.lane.release("node-b")
    node.loop.step()
    assert node.delivered() == ["a"]
    assert [c.released_to for c in node.cuts(1)] == ["node-b"]
    assert p1.lane.released.is_set() and not node.loop.released.is_set()
    assert [lane.partition for lane in node.loop.lanes] == [2]
    p1.add("left-behind", T0 + 10)
    p2.add("b", T0 + 10)
    node.clock.advance(20)
    node.loop.step()
    assert node.delivered() == ["a", "b"]
    assert len(node.cuts(1)) == 1


def test_a_lane_added_between_transactions_publishes_its_cut_at_once(node: Node) -> None:
    """A won claim adds a lane: its first transaction publishes its cut with nothing due, so
    its log shows the new term at once. Mutant caught: a lane added publishes only once
    something is due."""
    node.loop.step()
    added = node.lane(3, 12)
    node.loop.add_lane(added.lane)
    node.clock.advance(5)
    node.loop.step()
    (cut,) = node.cuts(3)
    assert (cut.term, cut.seek_ms) == (12, T0 + 5)
    added.add("c", T0 + 6)
    node.clock.advance(5)
    node.loop.step()
    assert node.delivered() == ["c"]


def test_a_write_to_any_lane_wakes_the_loop(node: Node) -> None:
    """The lanes' frontiers share one wake: a message placed in lane 2 wakes a loop waiting
    on lane 1's frontier for its next due message. Mutant caught: a wake of its own per
    frontier (the waiter slept its whole 60 s)."""
    waiting = threading.Event()

    def wait() -> None:
        waiting.set()
        node.partitions[1].lane.frontier.wait(None, T0, 60.0)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiting.wait(10)
    node.partitions[2].add("b", T0 + 5)  # the ledger's write notifies lane 2's frontier
    waiter.join(30)
    assert not waiter.is_alive()


def test_a_fence_ends_every_lane(node: Node) -> None:
    """The producer is the node's: a fence ends each lane's term. Mutant caught: only the
    first lane told."""
    node.partitions[1].add("a", T0 - 10)
    node.partitions[2].add("b", T0 - 10)
    node.publisher.fail_next("commit", Fenced("PRODUCER_FENCED"))
    node.loop.step()
    assert node.loop.fenced is not None
    assert node.partitions[1].fenced and node.partitions[2].fenced
    assert node.delivered() == []


def test_a_loop_whose_lanes_all_left_delivers_again_when_one_is_added(node: Node) -> None:
    """A node that handed every partition over and then wins one back. Mutant caught: a
    loop released once stays released (the new lane never delivered)."""
    for partition in node.partitions.values():
        partition.lane.release("node-b")
    node.loop.step()
    assert node.loop.released.is_set()
    added = node.lane(3, 2)
    node.loop.add_lane(added.lane)
    added.add("c", T0 + 1)
    node.clock.advance(5)
    node.loop.step()
    assert node.delivered() == ["c"] and not node.loop.released.is_set()


def _loop_with_between(node: Node, between: Callable[[], None]) -> TransactionLoop:
    """A loop over partition 1's lane that runs ``between`` before each transaction."""
    return TransactionLoop(
        spec=node.spec,
        publisher=node.publisher,
        lanes=[node.partitions[1].lane],
        retry=RETRY,
        clock=node.clock,
        metrics=node.metrics,
        between=between,
    )


def test_work_between_transactions_runs_with_none_open_and_may_add_a_lane(
    tmp_path: Path,
) -> None:
    """A cluster node's claims run on the loop's thread between two transactions
    (``between``), and a won claim's lane is delivered in the same step. Mutants caught: the
    hook run after the lanes were taken in (the new lane waited a step); the hook not run."""
    node = make_node(tmp_path, {1: 1})
    seen: list[bool] = []
    added = node.lane(2, 5)
    added.add("b", T0 - 1)

    def claims() -> None:
        seen.append(node.publisher.in_transaction)
        if len(seen) == 1:
            node.loop.add_lane(added.lane)

    node.loop = _loop_with_between(node, claims)
    node.loop.step()
    assert seen == [False]
    assert node.delivered() == ["b"] and [c.term for c in node.cuts(2)] == [5]
    node.loop.step()
    assert seen == [False, False]


def test_a_fence_met_between_transactions_ends_the_loop(tmp_path: Path) -> None:
    """A claim that finds this node's own producer fenced ends every lane, as a fenced
    commit does. Mutant caught: the hook's ``Fenced`` escaping the loop's step (the worker
    backs off and calls it again, delivering meanwhile)."""
    node = make_node(tmp_path, {1: 1})
    node.partitions[1].add("a", T0 - 1)

    def fenced() -> None:
        raise Fenced("PRODUCER_FENCED")

    node.loop = _loop_with_between(node, fenced)
    node.loop.step()
    assert node.loop.fenced is not None and node.partitions[1].fenced
    node.loop.step()
    assert node.delivered() == [] and node.publisher.calls == []


def test_a_fence_tells_the_lanes_joining_and_not_those_handed_over(tmp_path: Path) -> None:
    """A fence ends the lanes this node delivers or was about to (a lane added by a claim
    won just before), not one whose handover committed (its partition is its successor's:
    telling it would invite a retake); a lane added after the fence is told at once; lanes
    sharing a callback hear it once. Mutants caught: joining lanes not told; released lanes
    told; a lane added after the fence never told; a shared callback called per lane."""
    node = make_node(tmp_path, {1: 1, 2: 1})
    p1, p2 = node.partitions[1], node.partitions[2]
    p2.lane.release("node-b")
    node.loop.step()
    assert p2.lane.released.is_set()
    joining = node.lane(3, 4)
    heard: list[str] = []
    shared = MasterState(4, heard.append, heard.append)
    joining.lane.state = shared
    joining_too = node.lane(5, 4)
    joining_too.lane.state = shared
    late = node.lane(4, 4)
    late.lane.state = shared

    def claims() -> None:
        node.loop.add_lane(joining.lane)
        node.loop.add_lane(joining_too.lane)
        raise Fenced("PRODUCER_FENCED")

    node.loop._between = claims
    node.loop.step()
    assert p1.fenced and not p2.fenced, "the handed-over lane is not told"
    assert heard == ["PRODUCER_FENCED"]
    node.loop.add_lane(late.lane)
    assert heard == ["PRODUCER_FENCED", "PRODUCER_FENCED"], "a lane added after: at once"


def test_a_failure_between_transactions_other_than_a_fence_does_not_stop_delivery(
    tmp_path: Path,
) -> None:
    """A claim round that fails (a log unreadable, a fence timed out) is logged; the lanes
    owned go on. Mutant caught: the hook's exception escaping the step (every lane waits
    out the worker's backoff, again at every round)."""
    node = make_node(tmp_path, {1: 1})
    node.partitions[1].add("a", T0 - 1)

    def failing() -> None:
        raise RuntimeError("the claim log was not read in time")

    node.loop._between = failing
    node.loop.step()
    assert node.delivered() == ["a"]


def test_one_transaction_carries_at_most_transaction_max_records_over_every_lane(
    tmp_path: Path,
) -> None:
    """Each lane's share of a transaction is bounded so the transaction is: lanes far behind
    catch up over several transactions. Mutant caught: each lane bounded alone (two lanes:
    twice the limit in one transaction)."""
    node = make_node(tmp_path, {1: 1, 2: 1})
    node.loop._max_records = 4
    for n in range(3):
        node.partitions[1].add(f"a{n}", T0 - 30 + n)
        node.partitions[2].add(f"b{n}", T0 - 30 + n)
    node.loop.step()
    assert len(node.delivered()) == 4
    node.loop.step()
    assert sorted(node.delivered()) == ["a0", "a1", "a2", "b0", "b1", "b2"]


def test_a_partition_is_delivered_by_one_lane_only(node: Node) -> None:
    """Mutant caught: a second lane over a partition already delivered accepted (two batches
    over one schedule in one transaction: every message twice)."""
    again = Lane(
        progress_topic=progress_topic(1),
        store=node.partitions[1].store,
        ledger=node.partitions[1].ledger,
        replica=node.partitions[1].lane.replica,
        frontier=node.partitions[1].lane.frontier,
        state=MasterState(5, print, print),
        policy=DeadLetterPolicy(RETRY, lambda _t: True),
        clock=node.clock,
        partition=1,
    )
    with pytest.raises(ValueError, match="partition 1"):
        node.loop.add_lane(again)


def test_a_partition_handed_over_may_come_back_before_the_next_transaction(node: Node) -> None:
    """A member hands a partition over and wins it back (its successor handed it straight
    back) before the loop took the handed-over lane out. Mutant caught: the released lane
    still counted (the new lane refused, the partition undelivered)."""
    before = node.partitions[1]
    before.lane.release("node-b")
    node.loop.step()  # commits the handover
    assert before.lane.released.is_set()
    back = node.lane(1, 6)
    node.loop.add_lane(back.lane)
    back.add("c", T0 + 1)
    node.clock.advance(5)
    node.loop.step()
    assert "c" in node.delivered() and [c.term for c in node.cuts(1)][-1] == 6
    before.store.close()  # the fixture closes the partition's newer store


class _RecordingWake(Wake):
    """A wake that remembers what each wait was asked to wait for, and does not sleep."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[int | None, float]] = []

    def wait(self, until_ms: int | None, now_ms: int, max_wait_s: float) -> None:
        self.waits.append((until_ms, max_wait_s))


def test_a_loop_with_every_lane_idle_waits_for_the_first_message_due_in_any_lane(
    tmp_path: Path,
) -> None:
    """Mutant caught: the next slot of the lanes after the first ignored (the loop slept its
    longest wait past a message due in lane 2)."""
    wake = _RecordingWake()
    node = make_node(tmp_path, {1: 1, 2: 1}, idle_cuts=False, wake=wake)
    node.loop.step()  # each lane's first cut
    node.partitions[1].add("late", T0 + 500)
    node.partitions[2].add("soon", T0 + 20)
    node.loop.step()
    assert wake.waits[-1][0] == T0 + 20


def test_a_nodes_cuts_go_to_its_log_unless_they_carry_what_the_partitions_log_must_hold(
    tmp_path: Path,
) -> None:
    """With a node log, a transaction touches one progress partition however many lanes it
    carries: a lane's cut goes to the node's log (``cut:<p>``, at the node's partition)
    unless it is its term's first, carries repeat states, or names a successor, which go to
    the partition's own log with their cut. ``seq`` counts a lane's cuts in its term and a
    node-log cut names the last one its own log holds (``logged``). Mutants caught: every cut
    to the node log (a term's first cut and the repeat states' cut apart); ``logged`` not
    moved by a cut to the own log; the node log's partition left to the partitioner."""
    node = make_node(tmp_path, {1: 4, 2: 9}, idle_cuts=False, node_log=NODE_LOG)
    p1, p2 = node.partitions[1], node.partitions[2]
    node.loop.step()
    assert [(c.term, c.seq, c.logged) for c in node.cuts(1)] == [(4, 0, None)]
    assert [(c.term, c.seq, c.logged) for c in node.cuts(2)] == [(9, 0, None)]
    assert node.node_cuts() == []
    p1.add("a", T0 + 1)
    p2.add("b", T0 + 1)
    node.clock.advance(1)
    node.loop.step()
    assert sorted(node.delivered()) == ["a", "b"]
    assert len(node.cuts(1)) == 1 and len(node.cuts(2)) == 1
    found = {(at, p): (c.term, c.seq, c.logged, c.seek_ms) for at, p, c in node.node_cuts()}
    assert found == {(3, 1): (4, 1, 0, T0 + 1), (3, 2): (9, 1, 0, T0 + 1)}
    every = Repeat(RepeatKind.FIXED, 1000, 3)
    p1.add("tick", T0 + 2, every)  # its delivery's next occurrence is a repeat state
    node.clock.advance(1)
    node.loop.step()
    states = [
        st
        for st in (decode(r.key, r.value) for r in node.publisher.visible_on(progress_topic(1)))
        if isinstance(st, RepeatState)
    ]
    assert [st.message_id for st in states] == ["tick"]
    assert [(c.seq, c.logged, c.seek_ms) for c in node.cuts(1)][-1] == (2, None, T0 + 2)
    p1.add("c", T0 + 3)
    node.clock.advance(1)
    node.loop.step()
    last_at, last_p, last = node.node_cuts()[-1]
    assert (last_at, last_p, last.seq, last.logged) == (3, 1, 3, 2)
    p2.lane.release("node-b")
    node.loop.step()
    (handed,) = [c for c in node.cuts(2) if c.released_to is not None]
    assert (handed.released_to, handed.seq) == ("node-b", 2)


class _CountingStore:
    """A store's reads counted, the rest passed through (``Lane.store``)."""

    def __init__(self, store: RocksStore) -> None:
        self._store = store
        self.reads = 0

    def scan(self, *args: object) -> list[tuple[bytes, bytes]]:
        self.reads += 1
        return self._store.scan(*args)  # type: ignore[arg-type]

    def first_key_from(self, start: bytes) -> bytes | None:
        self.reads += 1
        return self._store.first_key_from(start)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_a_lane_with_nothing_due_is_not_read_until_a_write_touches_it_or_its_time_comes(
    tmp_path: Path,
) -> None:
    """One partition busy, the other idle with a message far ahead: after one look, the idle
    lane costs the busy one's transactions no read; a write to it, or its message falling
    due, makes it read again, and each is delivered. Mutants caught: every lane read in
    every transaction; a write's notification not lowering the known next slot (delivered
    late: only at the far message's time); the next slot kept across a commit (the lane read
    in every transaction after its first delivery)."""
    node = make_node(tmp_path, {1: 1, 2: 1}, idle_cuts=False, node_log=NODE_LOG)
    busy, idle = node.partitions[1], node.partitions[2]
    counting = _CountingStore(idle.store)
    idle.lane.store = counting  # type: ignore[assignment]
    idle.add("far", T0 + 60_000)
    node.loop.step()  # each lane's first cut
    node.clock.advance(1)
    node.loop.step()  # the idle lane is read once more: it learns its next slot
    reads = counting.reads
    for n in range(5):
        busy.add(f"b{n}", T0 + 2 + n)
        node.clock.advance(1)
        node.loop.step()
    assert counting.reads == reads, "an idle lane was read in the busy one's transactions"
    assert len(node.delivered()) == 5
    idle.add("near", T0 + 10)  # a write to the idle lane: read again, delivered when due
    node.clock.advance(10)
    node.loop.step()
    assert counting.reads > reads
    assert node.delivered()[-1] == "near"
    for n in range(3):  # one look after its commit, then quiet again
        busy.add(f"c{n}", node.clock.now_ms() + 1)
        node.clock.advance(1)
        node.loop.step()
        if n == 0:
            reads = counting.reads
    assert counting.reads == reads, "a lane that delivered stayed read in every transaction"
    node.clock.advance(60_000)
    node.loop.step()
    assert node.delivered()[-1] == "far"


def test_a_frontier_tells_the_earliest_slot_notified_since_it_was_last_asked() -> None:
    frontier = Frontier(0)
    assert frontier.take_notified() is None
    frontier.notify(50)
    frontier.notify(20)
    frontier.notify(30)
    assert frontier.take_notified() == 20
    assert frontier.take_notified() is None


def test_a_node_log_loop_refuses_a_lane_without_its_partition(tmp_path: Path) -> None:
    node = make_node(tmp_path, {1: 1}, node_log=NODE_LOG)
    lane = node.partitions[1].lane
    lane.partition = None
    with pytest.raises(ValueError, match="names its partition"):
        TransactionLoop(
            spec=node.spec,
            publisher=node.publisher,
            lanes=[lane],
            retry=RETRY,
            clock=node.clock,
            metrics=node.metrics,
            node_log=NODE_LOG,
        )


def test_a_lane_whose_next_message_was_cancelled_waits_for_nothing(tmp_path: Path) -> None:
    """A cancel deletes the message a lane knew as its next without placing anything (no
    notification): once that slot's time came, the lane read nothing due and must look for
    its next message again instead of taking the cancelled one as held by the cancel gate.
    Mutant caught: the known next slot kept (the loop woke every 10 ms until a commit)."""
    wake = _RecordingWake()
    node = make_node(tmp_path, {1: 1}, idle_cuts=False, wake=wake, node_log=NODE_LOG)
    partition = node.partitions[1]
    node.loop.step()  # the lane's first cut
    partition.add("gone", T0 + 50)
    node.loop.step()  # nothing due: the lane learns its next slot, T0 + 50
    assert wake.waits[-1][0] == T0 + 50
    cancel = (Op.CANCEL, "gone", 0, None)
    partition.ledger.apply_decoded([cancel], {1: partition.offset + 1}, [])
    node.clock.advance(60)
    node.loop.step()
    assert wake.waits[-1] == (None, 1.0), "a cancelled message taken as held by the gate"
    assert node.delivered() == []


def test_a_member_s_loop_starts_without_lanes_and_runs_its_rounds_until_one_is_added(
    tmp_path: Path,
) -> None:
    """A cluster member's loop exists before it owns anything: its claims run in
    ``between``. Without lanes it waits on the member's wake (at most ``max_idle_s``), then
    delivers the lane a round added. Mutants caught: an empty loop refused, or one that
    sleeps without bound (the recording wake would see no limit)."""
    wake = _RecordingWake()
    node = make_node(tmp_path, {}, wake=wake)
    rounds: list[int] = []
    added = node.lane(3, 7)
    added.add("c", T0 - 1)

    def between() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 2:
            node.loop.add_lane(added.lane)

    node.loop = TransactionLoop(
        spec=node.spec,
        publisher=node.publisher,
        lanes=[],
        retry=RETRY,
        clock=node.clock,
        metrics=node.metrics,
        between=between,
        node_log=NODE_LOG,
        wake=wake,
        max_idle_s=0.1,
    )
    assert node.loop.term == 0 and node.loop.cut_offset is None
    node.loop.step()
    assert rounds == [0] and wake.waits == [(None, 0.1)] and not node.delivered()
    node.loop.step()
    assert node.delivered() == ["c"]
    with pytest.raises(ValueError, match="wake"):
        TransactionLoop(
            spec=node.spec,
            publisher=node.publisher,
            lanes=[],
            retry=RETRY,
            clock=node.clock,
            metrics=node.metrics,
        )


def test_a_loop_says_how_long_it_could_not_deliver(tmp_path: Path) -> None:
    """A member's heartbeat says it owes deliveries once its loop is stuck or failing (its
    peers then suspect it, ``peer_watch.py``): failed transactions count from the first one,
    however many passes fail after it, until a commit. Mutants caught: failures not counted
    (only the time since the last pass), a commit that does not reset."""
    node = make_node(tmp_path, {1: 1}, idle_cuts=False)
    node.loop.step()
    node.partitions[1].add("a", T0 + 5)
    node.clock.advance(10)
    outage = KafkaException(KafkaError(KafkaError._TRANSPORT))
    node.publisher.fail_next("commit", outage)
    node.loop.step()
    first_failed = time.monotonic()
    wait_until(lambda: time.monotonic() - first_failed > 0.1, 10, "time passed")
    node.publisher.fail_next("commit", outage)
    node.loop.step()  # a later pass, failing too: the count goes on from the first
    assert node.delivered() == [] and node.metrics.totals()["transactions_aborted"] == 2
    assert node.loop.stalled_s() >= time.monotonic() - first_failed

    def redone() -> bool:
        node.loop.step()
        return node.delivered() != []

    before = time.monotonic()
    wait_until(redone, 10, "the redo commits")
    assert node.loop.stalled_s() <= time.monotonic() - before, "reset by the commit"


@dataclass
class _HeldGate:
    """A cancel gate proven up to ``proven`` only; records the slots wanted of it."""

    proven: int
    margin: int = 250
    wanted: list[int] = field(default_factory=list)

    def horizon(self, now_ms: int) -> int:
        return min(now_ms, self.proven + self.margin)

    def want(self, slot: int) -> None:
        self.wanted.append(slot)


def test_a_lane_held_by_its_gate_asks_for_its_next_slot_while_other_lanes_deliver(
    node: Node,
) -> None:
    """A quiet partition's gate is proven by probes only, and probes follow what lanes want:
    a lane held while another lane delivers must still want its next slot, or it waits for
    its partition's next record (p99 565 ms with ids that stick to one partition). Mutant
    caught: wants asked only when every lane is idle (the release before this)."""
    gate = _HeldGate(proven=T0 - 1000)
    held = node.lane(3, 5, gate)
    node.loop.add_lane(held.lane)
    node.loop.step()  # the new lane's first cut
    held.add("held", T0 - 100)  # due, past the gate's horizon (T0 - 750)
    node.partitions[1].add("a", T0 - 10)
    node.clock.advance(1)
    gate.wanted.clear()
    node.loop.step()  # lane 1 delivers; lane 3 is idle, held
    assert node.delivered() == ["a"]
    assert T0 - 100 in gate.wanted
    gate.proven = T0  # the probe it asked for came back
    node.clock.advance(1)
    node.loop.step()
    assert node.delivered() == ["a", "held"]


def test_a_delivering_lane_asks_its_gate_to_last_until_the_next_transaction(node: Node) -> None:
    """A partition that stopped receiving records is proven by probes only. A lane that
    still delivers must ask its gate ahead, or the probe is asked only once the lane is held
    and what fell due meanwhile waits a whole transaction period more (one member of 16
    partitions: p99 130 ms before commit at a 58 ms period, 67 with it). Mutant caught:
    only idle lanes want anything (the release before this)."""
    gate = _HeldGate(proven=T0 - 300)
    lane = node.lane(3, 5, gate)
    node.loop.add_lane(lane.lane)
    node.loop.step()  # the new lane's first cut, through T0 - 50
    lane.add("due", T0 - 5)
    gate.proven = T0 - 245  # a record read: the horizon is T0 + 5, short of the next pass
    node.clock.advance(10)
    gate.wanted.clear()
    node.loop.step()
    assert node.delivered() == ["due"]
    assert gate.wanted and max(gate.wanted) >= T0 + 10, "asked through the next transaction"


def test_an_abort_left_unanswered_after_a_failed_flush_ends_the_loop_at_once(node: Node) -> None:
    """A flush that failed (the broker away), then an abort Kafka did not answer for the
    transaction timeout: the producer is done (``TransactionalProducer.abort`` raises
    Fenced). Mutant caught: the abort's Fenced ignored, the loop ending only after a backoff
    and the next ``begin``."""
    node.partitions[1].add("a", T0 - 10)
    node.publisher.fail_next("flush", KafkaException(KafkaError(KafkaError._TRANSPORT)))
    node.publisher.fail_next("abort", Fenced("the abort was not answered in 10 s"))
    node.loop.step()
    assert node.loop.fenced is not None and "not answered" in node.loop.fenced
    assert node.delivered() == []

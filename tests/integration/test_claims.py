"""Claims on Apache Kafka (``group/claims.py``): the races the claim rule must survive, with
real fences, transactions and ``read_committed`` reads.

Each node here is what a cluster node of the second shape has: its own transactional
producer (``<ns>.delivery.<node>``), a claimant and a reader of the partition's log. Kafka
only: Tansu's ``read_committed`` readers also see aborted records.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos.group.claims import Claimant, ClaimFailed, ClaimLog, Decision, NodeCutSource
from chronos.group.node_log import NodeLog, NodeLogCuts
from chronos.group.standbys import ProgressLogs
from chronos.kafka.admin import RenewedAdmin, stable_end
from chronos.kafka.clients import KafkaClients
from chronos.kafka.errors import Fenced
from chronos.kafka.publisher import TransactionalPublisher
from chronos.schedule.progress_record import Claim, Cut, encode_claim, encode_cut, encode_node_cut
from chronos.settings import KafkaSettings

pytestmark = pytest.mark.kafka_only(reason="Tansu's read_committed readers see aborted records")

TIMEOUT_MS = 30_000
#: Wraps a fencing producer (a test's pause).
Wrap = Callable[[TransactionalPublisher], TransactionalPublisher]


class _Node:
    """One node's producer, claimant and log reader; ``on_fence`` wraps each fencing
    producer (a test's pause)."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        namespace: str,
        topic: str,
        admin: AdminClient,
        on_fence: Wrap = lambda p: p,
        timeout_s: float = 30.0,
        node_cuts: NodeCutSource | None = None,
    ) -> None:
        self.name = name
        self.clients = KafkaClients(KafkaSettings(bootstrap_servers=bootstrap), name)
        self.namespace = namespace
        self.topic = topic
        self.publisher = self.clients.transactional(self.id_of(name), TIMEOUT_MS, name=name)
        self.publisher.init(30)
        self.claimant = Claimant(
            node=name,
            publisher=self.publisher,
            open_transactional=lambda tid: on_fence(
                self.clients.transactional(tid, TIMEOUT_MS, name="fence")
            ),
            transactional_id=self.id_of,
            shared_id=lambda _topic, _p: f"{namespace}.delivery.shared",
            stable_end=lambda t, _p: stable_end(admin, t),
            timeout_s=timeout_s,
            node_cuts=node_cuts,
        )
        reader = f"{namespace}.reader.{name}"
        errors = self.clients.errors(name)
        self.log = ClaimLog(topic, 0, reader, self.clients.consumer, errors, inner=0)

    def id_of(self, node: str) -> str:
        return f"{self.namespace}.delivery.{node}"

    def claim(self, expected: str | None) -> Decision:
        return self.claimant.claim(self.log, expected)

    def begin_cut(self, term: int, seek: int) -> None:
        """A delivery transaction with its cut, left open (a node frozen mid-transaction)."""
        self.publisher.begin()
        key, value = encode_cut(Cut(term, seek, {0: seek}, self.name, seek))
        self.publisher.publish(self.topic, key, value, [], lambda _e, _m: None, 0)
        self.publisher.flush(30)

    def cut(self, term: int, seek: int) -> None:
        """A delivery transaction's cut, committed (raises ``Fenced`` once fenced)."""
        self.begin_cut(term, seek)
        self.publisher.commit()

    def renew(self) -> None:
        """A fenced node's restart of its producer: a new epoch of its own id."""
        self.publisher.close()
        self.publisher = self.clients.transactional(self.id_of(self.name), TIMEOUT_MS)
        self.publisher.init(30)
        self.claimant._publisher = self.publisher

    def close(self) -> None:
        self.log.close()
        self.publisher.close()


@pytest.fixture
def topic(admin: AdminClient, namespace: str) -> str:
    name = f"{namespace}.progress.p0"
    config = {"cleanup.policy": "compact"}
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(timeout=30)
    return name


@pytest.fixture
def nodes(
    kafka_bootstrap: str, admin: AdminClient, namespace: str, topic: str
) -> Iterator[Callable[..., _Node]]:
    made: list[_Node] = []

    def make(name: str, **kwargs: Any) -> _Node:
        node = _Node(name, kafka_bootstrap, namespace, topic, admin, **kwargs)
        made.append(node)
        return node

    yield make
    for node in made:
        node.close()


def holder_read_afresh(kafka_bootstrap: str, namespace: str, topic: str) -> tuple[str, int]:
    """The holder and term a new reader finds in the whole log."""
    clients = KafkaClients(KafkaSettings(bootstrap_servers=kafka_bootstrap), "afresh")
    log = ClaimLog(topic, 0, f"{namespace}.afresh", clients.consumer, clients.errors("afresh"))
    try:
        admin = clients.admin()
        assert log.read_to(stable_end(admin, topic), 30.0)
        assert log.ownership.node is not None
        return log.ownership.node, log.ownership.term
    finally:
        log.close()


def _paused_at(barrier: threading.Barrier) -> Wrap:
    def wrap(producer: TransactionalPublisher) -> TransactionalPublisher:
        barrier.wait(60)  # every watcher has read the log before any fences or claims
        return producer

    return wrap


def _open_claim(
    bootstrap: str, namespace: str, topic: str, read: ClaimLog, admin: AdminClient
) -> tuple[Producer, int]:
    """Node b's claim of term 2, written in a transaction left open (a paused producer); its
    offset."""
    paused = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{namespace}.delivery.b",
            "transaction.timeout.ms": 60_000,
        }
    )
    paused.init_transactions(30)
    paused.begin_transaction()
    assert read.read_to(stable_end(admin, topic), 30)
    after = read.ownership.last_offset  # what b read
    key, value = encode_claim(Claim(term=2, node="b", after=after, nonce="open"))
    offsets: list[int] = []
    placed = lambda _e, m: offsets.append(m.offset() or 0)  # noqa: E731
    paused.produce(topic, value, key, 0, on_delivery=placed)
    paused.flush(30)
    return paused, offsets[0]


def _wait_for_records_after(
    bootstrap: str, namespace: str, topic: str, offset: int, pending: Future[Decision]
) -> None:
    """Until the log's high watermark shows a committed record after ``offset`` (a claim and
    its transaction's marker), while ``pending`` stays undecided."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{namespace}.hw",
            "isolation.level": "read_uncommitted",  # the high watermark, not the LSO
        }
    )
    deadline = time.monotonic() + 60
    try:
        while reader.get_watermark_offsets(TopicPartition(topic, 0), 10)[1] < offset + 3:
            assert not pending.done(), pending.result()
            assert time.monotonic() < deadline, "the claim never reached the log"
    finally:
        reader.close()


def test_two_watchers_fence_a_frozen_holder_and_exactly_one_of_them_delivers(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """Three nodes: h holds the partition and freezes with a delivery transaction open; a and
    b both suspect it, read the same log, fence it and claim the same term. The log orders
    the claims: one wins, the other loses to it, and h's open cut never becomes visible."""
    h = nodes("h")
    assert h.claim("h").won
    h.cut(1, 100)
    h.begin_cut(1, 200)  # frozen here
    barrier = threading.Barrier(2)
    a, b = nodes("a", on_fence=_paused_at(barrier)), nodes("b", on_fence=_paused_at(barrier))

    with ThreadPoolExecutor(2) as pool:
        claims: list[Future[Decision]] = [pool.submit(n.claim, "h") for n in (a, b)]
        decisions = {n.name: f.result(120) for n, f in zip((a, b), claims, strict=True)}

    winners = [name for name, d in decisions.items() if d.won]
    assert len(winners) == 1, decisions
    winner, loser = (a, b) if winners == ["a"] else (b, a)
    won, lost = decisions[winner.name], decisions[loser.name]
    assert won.claim is not None and lost.claim is not None
    assert won.claim.term == lost.claim.term == 2, "both read term 1 and claimed term 2"
    assert lost.holder == winner.name and won.offset < lost.offset
    assert won.cut is not None and won.cut.seek_ms == 100, "the frozen cut was aborted"
    # Counting fences: each watcher fenced h once, nobody fenced a watcher.
    assert a.claimant.fenced == b.claimant.fenced == [h.id_of("h")]
    winner.cut(2, 300)  # the winner's producer was fenced by nobody
    with pytest.raises(Fenced):
        h.publisher.commit()  # thawed: its open transaction was aborted by the fences
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == (winner.name, 2)


def test_a_slow_watcher_loses_to_the_holder_that_retook_its_partition_first(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """w suspects a, reads the log (a at term 1), fences a and stalls before its claim; a,
    fenced, starts a new producer and retakes its partition (no fence: the log names a) with
    term 2. w's claim of term 2 lands after it and loses; a's new producer is never fenced."""
    fenced_a = threading.Event()
    go_on = threading.Event()

    class _Stalling:
        def __init__(self, producer: TransactionalPublisher) -> None:
            self.producer = producer

        def init(self, timeout_s: float) -> None:
            self.producer.init(timeout_s)
            fenced_a.set()
            assert go_on.wait(60)

        def close(self) -> None:
            self.producer.close()

    a = nodes("a")
    assert a.claim("a").won
    a.cut(1, 100)
    w = nodes("w", on_fence=_Stalling)
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(w.claim, "a")
        assert fenced_a.wait(60)
        with pytest.raises(Fenced):
            a.cut(1, 200)
        a.renew()
        retake = a.claim("a")
        assert retake.won and retake.claim is not None and retake.claim.term == 2
        assert retake.claim.fenced == (), "a retake fences nobody"
        go_on.set()
        late = slow.result(120)
    assert not late.won and late.holder == "a", late
    assert late.claim is not None and late.claim.term == 2 and late.offset > retake.offset
    a.cut(2, 300)  # a's new producer still commits
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("a", 2)


def test_a_claim_waits_for_an_earlier_open_claim_and_loses_to_it(
    nodes: Callable[..., _Node],
    kafka_bootstrap: str,
    admin: AdminClient,
    namespace: str,
    topic: str,
) -> None:
    """b's claim is written but its transaction stays open (a paused producer); c claims
    after it. c's read-back cannot pass b's open transaction (the last stable offset), so c
    decides only once b committed, and loses to it: deciding at the stable end instead
    would have let both deliver."""
    h = nodes("h")
    assert h.claim("h").won
    h.cut(1, 100)
    paused, b_offset = _open_claim(kafka_bootstrap, namespace, topic, h.log, admin)
    c = nodes("c")
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(c.claim, "h")
        # The positive signal first: c's claim is in the log (committed, past b's record).
        _wait_for_records_after(kafka_bootstrap, namespace, topic, b_offset, pending)
        assert not pending.done(), "decided before b's open claim ended"
        paused.commit_transaction(30)
        decision = pending.result(120)
    assert not decision.won and decision.holder == "b", decision
    assert decision.offset > b_offset
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("b", 2)


def test_a_watcher_whose_suspect_lost_the_partition_fences_nobody(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """The compare of the compare-and-set: a stale watcher asks to take the partition from h,
    but the log names a since: it fences nobody and claims nothing."""
    h, a = nodes("h"), nodes("a")
    assert h.claim("h").won
    assert a.claim("h").won
    stale = nodes("s")
    decision = stale.claim("h")
    assert not decision.won and decision.claim is None and decision.holder == "a"
    assert stale.claimant.fenced == []
    a.cut(2, 100)
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("a", 2)


def test_a_claim_over_a_replica_group_of_the_last_release_fences_its_shared_id(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """Migration: the log holds only cuts of a per-partition group, whose master's producer
    has the partition's shared id; the first claim fences that id."""
    old = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"{namespace}.delivery.shared",
            "transaction.timeout.ms": 60_000,
        }
    )
    old.init_transactions(30)
    old.begin_transaction()
    key, value = encode_cut(Cut(5, 100, {0: 100}, "old-master", 100))
    old.produce(topic, value, key, 0)
    old.commit_transaction(30)
    a = nodes("a")
    decision = a.claim("old-master")
    assert decision.won and decision.claim is not None and decision.claim.term == 6
    assert a.claimant.fenced == [a.id_of("old-master"), f"{namespace}.delivery.shared"]
    old.begin_transaction()
    old.produce(topic, value, key, 0)
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() and "FENCED" in error.name(), error


def test_an_undecided_claim_is_resumed_and_wins_once_the_earlier_open_claim_aborts(
    nodes: Callable[..., _Node],
    kafka_bootstrap: str,
    admin: AdminClient,
    namespace: str,
    topic: str,
) -> None:
    """c's read-back gives up behind b's open claim (undecided: neither won nor lost); b's
    transaction aborts; resumed, c's claim wins, from h's last cut."""
    h = nodes("h")
    assert h.claim("h").won
    h.cut(1, 100)
    paused, b_offset = _open_claim(kafka_bootstrap, namespace, topic, h.log, admin)
    c = nodes("c", timeout_s=3.0)
    undecided = c.claim("h")
    assert undecided.undecided and not undecided.won and undecided.offset > b_offset
    paused.abort_transaction(30)
    decision = c.claimant.resume(c.log, undecided)
    assert decision.won and not decision.undecided, decision
    assert decision.cut is not None and decision.cut.seek_ms == 100
    c.cut(2, 200)
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("c", 2)


def test_a_winner_starts_from_a_cut_the_holder_committed_after_the_claimant_read(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """h commits one more cut after w read the log and before w's fence: w wins and starts
    from that cut, not from what it had read (which would deliver 100..150 again)."""
    h = nodes("h")
    assert h.claim("h").won
    h.cut(1, 100)

    def late_cut(producer: TransactionalPublisher) -> TransactionalPublisher:
        h.cut(1, 150)  # w has read up to h's first cut
        return producer

    w = nodes("w", on_fence=late_cut)
    decision = w.claim("h")
    assert decision.won and decision.cut is not None and decision.cut.seek_ms == 150, decision
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("w", 2)


def test_a_round_fences_a_suspect_once_and_claims_its_partitions_in_one_transaction(
    nodes: Callable[..., _Node],
    kafka_bootstrap: str,
    admin: AdminClient,
    namespace: str,
    topic: str,
) -> None:
    """A watcher that suspects a node holding several partitions (``Claimant.claim_all``):
    one fence for the round, every claim in one transaction, each decided alone; a partition
    whose log names another holder is left alone. h freezes with a transaction open over
    all its partitions. Mutants caught: a fence per partition (the suspect fenced three
    times); a transaction per claim; the round claiming a partition held by another."""
    others = [f"{namespace}.progress.p{p}" for p in (1, 2, 3)]
    config = {"cleanup.policy": "compact"}
    for future in admin.create_topics([NewTopic(t, 1, 1, config=config) for t in others]).values():
        future.result(timeout=30)
    held = [topic, *others[:2]]  # h's partitions; others[2] is o's

    def logs_of(node: _Node, topics: list[str]) -> list[ClaimLog]:
        clients = node.clients
        return [
            ClaimLog(t, 0, f"{namespace}.round.{node.name}", clients.consumer, clients.errors("r"))
            for t in topics
        ]

    h, w, o = nodes("h"), nodes("w"), nodes("o")
    h_logs, o_logs = logs_of(h, held), logs_of(o, others[2:])
    assert all(d.won for d in h.claimant.claim_all(h_logs, "h"))
    assert h.claimant.fenced == [f"{namespace}.delivery.shared"], "the shared id, once"
    assert o.claimant.claim_all(o_logs, "o")[0].won
    for claim_log in (*h_logs, *o_logs):
        claim_log.close()

    def cuts(seek: int, commit: bool) -> None:
        h.publisher.begin()
        for t in held:
            key, value = encode_cut(Cut(1, seek, {0: seek}, "h", seek))
            h.publisher.publish(t, key, value, [], lambda _e, _m: None, 0)
        assert h.publisher.flush(30) == 0
        if commit:
            h.publisher.commit()

    cuts(100, commit=True)
    cuts(200, commit=False)  # frozen with a transaction open on all three
    begun: list[int] = []
    begin = w.publisher.begin

    def counted_begin() -> None:
        begun.append(1)
        begin()

    w.publisher.begin = counted_begin  # type: ignore[method-assign]
    w_logs = logs_of(w, [*held, others[2]])
    decisions = w.claimant.claim_all(w_logs, "h")
    assert [d.won for d in decisions] == [True, True, True, False], decisions
    assert w.claimant.fenced == [h.id_of("h")], "the suspect fenced once for the round"
    assert len(begun) == 1, "the round's claims in one transaction"
    for decision in decisions[:3]:
        assert decision.claim is not None and decision.claim.term == 2
        assert decision.cut is not None and decision.cut.seek_ms == 100, "the open cut aborted"
    skipped = decisions[3]
    assert skipped.claim is None and skipped.holder == "o"
    with pytest.raises(Fenced):
        h.publisher.commit()  # thawed: the round's fence aborted its transaction
    for claim_log in w_logs:
        claim_log.close()
    assert holder_read_afresh(kafka_bootstrap, namespace, others[0]) == ("w", 2)
    assert holder_read_afresh(kafka_bootstrap, namespace, others[2]) == ("o", 1)


def test_a_round_claims_what_it_fenced_when_one_fence_fails(
    nodes: Callable[..., _Node], admin: AdminClient, namespace: str, topic: str
) -> None:
    """One holder cannot be fenced in time: its partition is not claimed (a claim without
    its fence could deliver beside a live owner), the rest of the round is; a round of one
    (``claim``) raises. Mutant caught: the whole round lost to one failed fence."""
    second = f"{namespace}.progress.q"
    config = {"cleanup.policy": "compact"}
    admin.create_topics([NewTopic(second, 1, 1, config=config)])[second].result(timeout=30)
    h = nodes("h")
    assert h.claim("h").won
    h.cut(1, 100)
    w = nodes("w")
    real = w.claimant._open_transactional

    class _Refusing:
        def init(self, timeout_s: float) -> None:
            raise KafkaException("injected: the coordinator did not answer")

        def close(self) -> None:
            pass

    def fencer(transactional_id: str) -> TransactionalPublisher:
        if transactional_id == h.id_of("h"):
            return _Refusing()  # type: ignore[return-value]
        return real(transactional_id)

    w.claimant._open_transactional = fencer
    clients = w.clients
    other = ClaimLog(second, 0, f"{namespace}.q.w", clients.consumer, clients.errors("q"))
    try:
        refused, claimed = w.claimant.claim_all([w.log, other], "h")
    finally:
        other.close()
    assert not refused.won and refused.claim is None and "could not fence" in refused.reason
    assert claimed.won and claimed.claim is not None
    h.cut(1, 200)  # h was not fenced: it still commits
    with pytest.raises(ClaimFailed, match="could not fence"):
        w.claim("h")


@pytest.fixture
def node_logs(admin: AdminClient, namespace: str) -> str:
    """A node-log topic of two partitions (``group/node_log.py``)."""
    name = f"{namespace}.progress.nodes"
    config = {"cleanup.policy": "compact"}
    admin.create_topics([NewTopic(name, 2, 1, config=config)])[name].result(timeout=30)
    return name


class _NodeLogReader:
    """A node's reader of the node log (what its standbys' worker runs), on a thread."""

    def __init__(self, bootstrap: str, namespace: str, topic: str, admin: AdminClient) -> None:
        clients = KafkaClients(KafkaSettings(bootstrap_servers=bootstrap), "node-log")
        self.logs = ProgressLogs(
            f"{namespace}.reader.nodes-{uuid.uuid4().hex[:6]}",
            clients.consumer,
            clients.errors("n"),
            node_log=(topic, 2),
        )
        self.cuts = NodeLogCuts(self.logs.node_state, topic, 2, RenewedAdmin(lambda: admin))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.logs.read(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.logs.close()


def _node_cut(node: _Node, node_topic: str, cut: Cut) -> None:
    """One delivery transaction of ``node`` with ``cut`` of inner partition 0 in its node log."""
    node.publisher.begin()
    key, value = encode_node_cut(0, cut)
    at = NodeLog.of(node_topic, node.name, 2).partition
    node.publisher.publish(node_topic, key, value, [], lambda _e, _m: None, at)
    node.publisher.flush(30)
    node.publisher.commit()


def test_a_claim_starts_from_the_holders_node_log_and_carries_it_to_the_next(
    nodes: Callable[..., _Node],
    node_logs: str,
    kafka_bootstrap: str,
    namespace: str,
    admin: AdminClient,
) -> None:
    """A cluster node's cuts are mostly in its node log. Holder c wrote its term's first cut
    (seek 10) to the partition's log and a later one (seek 30) to its node log; b fences c,
    reads c's node log and wins from seek 30. b dies before writing a cut; a claims over it
    and starts from seek 30 too, which only b's claim still says. Mutants caught: the node
    log not read (b starts from seek 10: everything c delivered after it again); the cut not
    carried in the claim (a starts from seek 10)."""
    readers = [_NodeLogReader(kafka_bootstrap, namespace, node_logs, admin) for _ in range(2)]
    try:
        c = nodes("c")
        assert c.claim(None).won
        c.cut(1, 10)  # its term's first cut, in the partition's log (seq 0)
        _node_cut(c, node_logs, Cut(1, 30, {0: 30}, "c", 30, seq=1, logged=0))
        b = nodes("b", node_cuts=readers[0].cuts)
        decided = b.claim("c")
        assert decided.won and decided.cut is not None and decided.cut.seek_ms == 30
        a = nodes("a", node_cuts=readers[1].cuts)
        retaken = a.claim("b")
        assert retaken.won and retaken.cut is not None and retaken.cut.seek_ms == 30
    finally:
        for reader in readers:
            reader.close()


class _Stuck:
    """A node log that cannot be read to its end (an open transaction holds it)."""

    def last_cut(self, holder: str, partition: int, timeout_s: float) -> Cut | None:
        raise TimeoutError("held")


def test_a_claim_whose_holders_node_log_was_not_read_is_not_made(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """Without the holder's last cut the claimant would start from an older one: it claims
    nothing. Mutant caught: the claim made from the partition's log alone."""
    c = nodes("c")
    assert c.claim(None).won
    c.cut(1, 10)
    b = nodes("b", node_cuts=_Stuck())
    with pytest.raises(ClaimFailed, match="node log was not read"):
        b.claim("c")
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("c", 1)


def test_a_claim_over_a_holder_whose_node_log_partition_is_empty_is_made(
    nodes: Callable[..., _Node],
    node_logs: str,
    kafka_bootstrap: str,
    namespace: str,
    admin: AdminClient,
) -> None:
    """Holder d (node-log partition 0) wrote no node cut: its partition is empty, and a
    reader has no position there before a record. Mutant caught: only positions of records
    read count (every claim over d times out, for ever)."""
    assert NodeLog.of(node_logs, "d", 2).partition == 0
    reader = _NodeLogReader(kafka_bootstrap, namespace, node_logs, admin)
    try:
        d = nodes("d")
        assert d.claim(None).won
        d.cut(1, 10)
        b = nodes("b", node_cuts=reader.cuts, timeout_s=10.0)
        decided = b.claim("d")
        assert decided.won and decided.cut is not None and decided.cut.seek_ms == 10
    finally:
        reader.close()


def test_a_claim_waits_out_another_nodes_open_transaction_in_the_holders_node_log(
    nodes: Callable[..., _Node],
    node_logs: str,
    kafka_bootstrap: str,
    namespace: str,
    admin: AdminClient,
) -> None:
    """Nodes x and c share node-log partition 1. x's transaction is open there when c commits
    its last cut (seek 30) after it: the partition's stable end lies below c's cut. The
    claimant must not take the older cut it can read; it claims nothing until x's
    transaction ended, then starts from seek 30. Mutant caught: reading to the last stable
    offset (b wins from seek 10 and delivers again what c delivered)."""
    assert NodeLog.of(node_logs, "x", 2).partition == NodeLog.of(node_logs, "c", 2).partition
    reader = _NodeLogReader(kafka_bootstrap, namespace, node_logs, admin)
    x = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": f"{namespace}.delivery.x",
            "transaction.timeout.ms": 60_000,
        }
    )
    try:
        c = nodes("c")
        assert c.claim(None).won
        c.cut(1, 10)
        x.init_transactions(30)
        x.begin_transaction()
        key, value = encode_node_cut(5, Cut(1, 5, {5: 5}, "x", 5, seq=1, logged=0))
        x.produce(node_logs, value, key, NodeLog.of(node_logs, "x", 2).partition)
        x.flush(30)
        _node_cut(c, node_logs, Cut(1, 30, {0: 30}, "c", 30, seq=1, logged=0))
        # Long enough for the fence on a slow machine; the node-log wait then times out.
        b = nodes("b", node_cuts=reader.cuts, timeout_s=8.0)
        with pytest.raises(ClaimFailed, match="node log was not read"):
            b.claim("c")
        x.commit_transaction(30)
        decided = b.claim("c")
        assert decided.won and decided.cut is not None and decided.cut.seek_ms == 30
    finally:
        reader.close()


def test_a_handover_claim_whose_holder_took_the_partition_back_fences_nobody(
    nodes: Callable[..., _Node], kafka_bootstrap: str, namespace: str, topic: str
) -> None:
    """b's view says a handed it the partition, but a took it back since (a retake after the
    handover: b never claimed in time). b's claim of a handed partition reads the log, finds
    it handed to nobody, and claims nothing: fencing a then would end every lane a delivers.
    Mutant caught: a handed claim made whatever the log says now (b fences a and wins)."""
    a = nodes("a")
    assert a.claim("a").won
    a.publisher.begin()
    key, value = encode_cut(Cut(1, 100, {0: 100}, "a", 100, released_to="b"))
    a.publisher.publish(topic, key, value, [], lambda _e, _m: None, 0)
    a.publisher.flush(30)
    a.publisher.commit()
    assert a.claim("a").won  # the retake, term 2
    b = nodes("b")
    (decision,) = b.claimant.claim_all([b.log], "a", handed=True)
    assert not decision.won and decision.claim is None, decision
    assert "no longer hands" in decision.reason
    assert b.claimant.fenced == []
    assert holder_read_afresh(kafka_bootstrap, namespace, topic) == ("a", 2)

"""The master's transaction loop against the stub publisher and a real RocksDB.

Each test names the mutant it was seen to catch (the code changed, the test failed, the change
undone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import FakeClock
from chronos.delivery.attempts import Attempts
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.delivery.policies import Policies
from chronos.group.lane import Lane, MasterState
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.group.transactions import TransactionLoop
from chronos.kafka.errors import Fenced, NotAuthorized, TransactionAborted
from chronos.kafka.publishers.stub import StubPublisher
from chronos.lifecycle import LoopWorker
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage, Op
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut, RepeatState, decode
from chronos.settings import (
    ChronosSettings,
    DeleteSettings,
    DeliverySettings,
    StoreSettings,
    TopicPolicy,
)
from chronos.store import codec, keys
from chronos.store.rocks import RocksStore
from chronos.wire import H_DLQ_REASON, H_ID

T0 = 1_700_000_000_000
TARGET = "orders"
#: A topic chronos may not write while a test says so.
DENIED = "audit"


@dataclass
class Master:
    """One term of a master: its store, a stub publisher, and what its callbacks heard."""

    store: RocksStore
    ledger: Ledger
    publisher: StubPublisher
    clock: FakeClock
    metrics: CountingMetrics
    spec: GroupSpec
    loop: TransactionLoop
    fenced: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    attempts: Attempts = field(default_factory=Attempts)
    offset: int = 0

    def add(self, message_id: str, due_ms: int, topic: str = TARGET) -> None:
        message = DelayMessage(message_id, topic, b"k", b"v", [], due_ms)
        item = (Op.ADD, message_id, due_ms, codec.encode(message))
        self.ledger.apply_decoded([item], {0: self.offset + 1}, [(0, self.offset)])
        self.offset += 1

    def delivered(self, topic: str = TARGET) -> list[str]:
        """Ids a read_committed consumer of ``topic`` sees, in order."""
        return [(r.header(H_ID) or b"").decode() for r in self.publisher.visible_on(topic)]

    def cuts(self) -> list[Cut]:
        records = self.publisher.visible_on(self.spec.progress_topic)
        return [c for c in (decode(r.key, r.value) for r in records) if isinstance(c, Cut)]


#: Retry settings of most tests: no wait between transactions.
RETRY = DeliverySettings(retry_backoff_initial_ms=1, retry_backoff_max_ms=1, give_up_after_s=5)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    made = make_master(tmp_path)
    yield made
    made.store.close()


def make_master(
    tmp_path: Path,
    retry: DeliverySettings = RETRY,
    unwritable: Callable[[Collection[str]], set[str]] | None = None,
    policies: Policies | None = None,
    paced: dict[str, float] | None = None,
    store: RocksStore | None = None,
    fake_monotonic: bool = False,
) -> Master:
    """A master of term 7 leading from ``T0 - 1000``; ``unwritable`` answers which topics
    chronos may not write, as Kafka's authorizer would; ``policies`` and ``paced`` (the last
    cut's rate plans) for rates; ``store``: a previous master's (a takeover);
    ``fake_monotonic``: the dead-letter policy's clock is the test's."""
    settings = ChronosSettings.model_validate(
        {
            "topics": {"namespace": "ns"},
            "group": {"name": "g", "transaction_interval_ms": 0, "progress_interval_ms": 10},
        }
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    taken_over = store is not None
    store = store or RocksStore(tmp_path, StoreSettings(wal_sync_interval_ms=60_000))
    clock, metrics = FakeClock(T0), CountingMetrics()
    frontier = Frontier(0)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, clock, DeleteSettings(), placement)
    replica = ReplicaStore(store, frontier, ledger, placement)
    replica.lead((store.read_seek() or 0) if taken_over else T0 - 1000, [0])
    publisher = StubPublisher(topics={TARGET, DENIED, spec.dead_letter_topic, spec.progress_topic})
    fenced: list[str] = []
    fatal: list[str] = []
    attempts = Attempts()
    lane = Lane(
        progress_topic=spec.progress_topic,
        store=store,
        ledger=ledger,
        replica=replica,
        frontier=frontier,
        state=MasterState(7, fenced.append, fatal.append, paced=paced or {}),
        policy=DeadLetterPolicy(
            retry,
            lambda t: publisher.topic_exists(t, 1.0),
            monotonic=(lambda: clock.now_ms() / 1000) if fake_monotonic else time.monotonic,
            unwritable=unwritable,
        ),
        clock=clock,
        attempts=attempts,
        policies=policies,
    )
    loop = TransactionLoop(
        spec=spec, publisher=publisher, lanes=[lane], retry=retry, clock=clock, metrics=metrics
    )
    return Master(store, ledger, publisher, clock, metrics, spec, loop, fenced, fatal, attempts)


def test_deliveries_and_the_progress_that_covers_them_commit_together(master: Master) -> None:
    for n in range(3):
        master.add(f"m{n}", T0 - 10 + n)
    master.add("later", T0 + 5000)
    master.loop.step()
    assert master.publisher.calls == ["begin", "commit"]
    assert master.delivered() == ["m0", "m1", "m2"]
    (cut,) = master.cuts()
    assert (cut.term, cut.seek_ms, cut.offsets) == (7, T0, {0: 4})
    assert master.ledger.seek_ms == T0  # the store's seek is a cache of the committed cut


def test_a_term_knows_where_its_last_committed_cut_lies(master: Master) -> None:
    """What a master whose producer broke reads the progress topic from, to learn whether
    another master committed since (``Replica._retakes``). Mutant caught: the offset of a
    cut whose transaction aborted."""
    master.publisher.placed = True
    master.add("m", T0 - 10)
    master.loop.step()
    progress = [r for r in master.publisher.published if r.topic == master.spec.progress_topic]
    assert master.loop.cut_offset == len(progress) - 1
    committed = master.loop.cut_offset
    master.publisher.fail_next("commit", TransactionAborted("refused"))
    master.clock.advance(100)
    master.add("n", T0 + 50)
    master.loop.step()
    assert master.metrics.totals()["transactions_aborted"] == 1
    assert master.loop.cut_offset == committed


def test_a_commit_kafka_refuses_moves_nothing_and_the_range_is_tried_again(
    master: Master,
) -> None:
    """Mutant caught: the cut applied to the store before ``commit()`` (the seek moved past
    messages no read_committed consumer ever saw)."""
    master.add("m", T0 - 10)
    master.publisher.fail_next("commit", TransactionAborted("CONCURRENT_TRANSACTIONS"))
    master.loop.step()
    assert master.delivered() == [] and master.ledger.seek_ms == T0 - 1000
    assert master.metrics.totals()["transactions_aborted"] == 1
    master.loop.step()
    assert master.delivered() == ["m"] and master.ledger.seek_ms == T0


def test_a_broker_gone_mid_commit_aborts_quietly_and_tries_the_range_again(
    master: Master,
) -> None:
    """A broker killed under a commit: one warning, no exception out of the loop (a
    traceback each time), no transaction left open, the same range after the backoff.
    Mutant caught: the KafkaException re-raised to the worker loop."""
    master.add("m", T0 - 10)
    gone = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
    master.publisher.fail_next("commit", gone)
    master.loop.step()
    assert master.delivered() == [] and not master.publisher.in_transaction
    assert master.metrics.totals()["transactions_aborted"] == 1
    master.loop.step()
    assert master.delivered() == ["m"] and master.ledger.seek_ms == T0


def test_a_record_refused_for_good_aborts_once_then_goes_to_dead_letters(master: Master) -> None:
    """Mutant caught: permanent failures not remembered after an abort (every retry aborted
    again: an abort loop that held up the whole batch)."""
    master.publisher.outcome = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        if r.topic == TARGET and r.header(H_ID) == b"huge"
        else None
    )
    for message_id in ("a", "huge", "b"):
        master.add(message_id, T0 - 10)
    master.loop.step()
    master.loop.step()
    assert master.publisher.calls == ["begin", "abort", "begin", "commit"]
    assert master.delivered() == ["a", "b"]
    (dead,) = master.publisher.visible_on(master.spec.dead_letter_topic)
    assert dead.header(H_ID) == b"huge"
    assert (dead.header(H_DLQ_REASON) or b"").startswith(b"MSG_SIZE_TOO_LARGE")


def test_a_record_refused_at_once_is_dead_lettered_in_the_same_transaction(
    master: Master,
) -> None:
    """librdkafka refuses some records in ``produce()`` itself: they were never part of the
    transaction, so it commits with their dead letters instead of aborting."""
    master.publisher.at_once = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        if r.topic == TARGET and r.header(H_ID) == b"huge"
        else None
    )
    master.add("a", T0 - 10)
    master.add("huge", T0 - 9)
    master.loop.step()
    assert master.publisher.calls == ["begin", "commit"]
    assert master.delivered() == ["a"]
    dead = master.publisher.visible_on(master.spec.dead_letter_topic)
    assert [r.header(H_ID) for r in dead] == [b"huge"]


def test_an_unknown_target_topic_goes_to_dead_letters_once_kafka_said_so_twice(
    master: Master,
) -> None:
    """The first "unknown" may be a topic being created on demand: the transaction waits for
    a second answer a second later (aborted, nothing visible), then dead-letters it."""
    master.add("lost", T0 - 10, topic="nowhere")
    master.add("kept", T0 - 9)
    master.loop.step()
    assert master.publisher.calls == ["begin", "abort"] and master.delivered() == []
    master.loop.step()
    assert master.publisher.calls == ["begin", "abort", "begin", "commit"]
    (dead,) = master.publisher.visible_on(master.spec.dead_letter_topic)
    assert (dead.header(H_DLQ_REASON) or b"").startswith(b"UNKNOWN_TOPIC_OR_PART")
    assert master.delivered() == ["kept"]


def test_a_topic_created_on_demand_is_delivered_to(master: Master) -> None:
    topics = master.publisher.topics
    assert topics is not None
    master.add("fresh", T0 - 10, topic="new.topic")
    master.loop.step()
    topics.add("new.topic")  # the first question created it
    master.loop.step()
    assert master.delivered("new.topic") == ["fresh"]
    assert master.publisher.visible_on(master.spec.dead_letter_topic) == []


def test_a_record_error_is_retried_then_given_up_on_as_a_node_alone_does(master: Master) -> None:
    """One policy for both modes: ``delivery.give_up_after_s`` holds in transactions too.
    Mutant caught: the loop never giving up (the transactional rule before the seam)."""
    master.publisher.outcome = lambda r: (
        KafkaError(KafkaError.KAFKA_STORAGE_ERROR) if r.topic == TARGET else None
    )
    master.add("stuck", T0 - 10)
    master.loop.step()
    master.clock.advance(6_000)  # past give_up_after_s=5
    master.loop.step()
    master.loop.step()
    assert master.publisher.calls == ["begin", "abort", "begin", "abort", "begin", "commit"]
    (dead,) = master.publisher.visible_on(master.spec.dead_letter_topic)
    assert (dead.header(H_DLQ_REASON) or b"").startswith(b"gave up after 2 attempts")


def test_an_outage_is_retried_for_as_long_as_it_lasts(master: Master) -> None:
    master.publisher.hold = lambda r: True  # Kafka does not answer
    master.add("m", T0 - 10)
    for _ in range(3):
        master.loop.step()
        master.clock.advance(10_000)
    assert master.publisher.calls == ["begin", "abort"] * 3
    master.publisher.hold = lambda r: False
    master.loop.step()
    assert master.delivered() == ["m"]
    assert master.publisher.visible_on(master.spec.dead_letter_topic) == []


def test_a_fenced_record_ends_the_term(master: Master) -> None:
    """Mutant caught: a fenced outcome taken for a record error (the zombie kept retrying
    instead of turning into a backup)."""
    master.publisher.outcome = lambda r: KafkaError(KafkaError.PRODUCER_FENCED)
    master.add("m", T0 - 10)
    master.loop.step()
    assert len(master.fenced) == 1 and "PRODUCER_FENCED" in master.fenced[0]
    assert master.loop.fenced is not None and master.metrics.totals()["fenced"] == 1
    master.loop.step()  # delivers nothing more
    assert master.publisher.calls == ["begin", "abort"]
    assert master.delivered() == [] and master.fatal == []


def test_fenced_at_commit_ends_the_term_and_moves_nothing(master: Master) -> None:
    master.add("m", T0 - 10)
    master.publisher.fail_next("commit", Fenced("PRODUCER_FENCED: another master"))
    master.loop.step()
    assert master.fenced and master.ledger.seek_ms == T0 - 1000 and master.delivered() == []


def test_refused_credentials_end_the_node_instead_of_a_takeover_loop(master: Master) -> None:
    """Mutant caught: NotAuthorized handled as Fenced (the node demoted, took over again, and
    was refused again, every second for ever)."""
    master.add("m", T0 - 10)
    refused = NotAuthorized("commit_transaction", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    master.publisher.fail_next("commit", refused)
    master.loop.step()
    assert master.fenced == []
    assert len(master.fatal) == 1 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in master.fatal[0]
    master.loop.step()
    assert master.delivered() == []


def test_a_progress_topic_chronos_may_not_write_ends_the_node(master: Master) -> None:
    progress = master.spec.progress_topic
    master.publisher.outcome = lambda r: (
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED) if r.topic == progress else None
    )
    master.add("m", T0 - 10)
    master.loop.step()
    assert len(master.fatal) == 1 and progress in master.fatal[0]
    assert master.delivered() == []


class Authorizer:
    """Which topics chronos may not write, as Kafka's authorizer answers; a transaction with a
    record to one of them comes back with that record purged and names no topic."""

    def __init__(self, master: Master) -> None:
        self.denied: set[str] = {DENIED}
        self.asked: list[set[str]] = []
        master.publisher.outcome = lambda r: (
            KafkaError(KafkaError._PURGE_QUEUE) if r.topic in self.denied else None
        )

    def __call__(self, topics: Collection[str]) -> set[str]:
        self.asked.append(set(topics))
        return self.denied & set(topics)


def _master_with(tmp_path: Path, **policy: object) -> tuple[Master, Authorizer]:
    """A master whose ``DENIED`` topic is refused, with ``policy`` for it (none if empty)."""
    topics = {DENIED: TopicPolicy.model_validate(policy)} if policy else {}
    rights: list[Authorizer] = []
    made = make_master(
        tmp_path,
        RETRY.model_copy(update={"topics": topics}),
        unwritable=lambda topics: rights[0](topics),
    )
    rights.append(Authorizer(made))
    return made, rights[0]


def _states(master: Master) -> list[RepeatState]:
    records = master.publisher.visible_on(master.spec.progress_topic)
    found = (decode(r.key, r.value) for r in records)
    return [st for st in found if isinstance(st, RepeatState)]


def test_without_a_policy_a_topic_chronos_may_not_write_is_dead_lettered_without_an_abort(
    tmp_path: Path,
) -> None:
    """Kafka is asked about a topic's rights at its first sight, outside the transaction:
    a record to a refused topic would fail the transaction as a whole (and on Apache Kafka
    4.1.1 its abort ends the producer). Mutant caught: no question before the transaction
    (an abort, then the same for ever: the purge was taken for an outage)."""
    master, rights = _master_with(tmp_path)
    try:
        master.add("x", T0 - 10, topic=DENIED)
        master.add("a", T0 - 9)
        master.loop.step()
        assert master.publisher.calls == ["begin", "commit"]
        assert rights.asked == [{DENIED, TARGET}]
        assert master.delivered() == ["a"]
        (dead,) = master.publisher.visible_on(master.spec.dead_letter_topic)
        assert dead.header(H_ID) == b"x"
        assert (dead.header(H_DLQ_REASON) or b"").startswith(b"TOPIC_AUTHORIZATION_FAILED")
        master.add("b", T0 + 100)
        master.clock.advance(100)
        master.loop.step()
        assert rights.asked == [{DENIED, TARGET}], "asked again about a known topic"
    finally:
        master.store.close()


def test_a_topic_policy_defers_a_refused_message_and_holds_back_nothing_else(
    tmp_path: Path,
) -> None:
    """The transaction delivers the others and moves the refused message to its next
    attempt's slot; once the topic takes it, it is delivered. Mutants caught: its state not
    published (a backup would deliver it at the old slot), tried before its slot."""
    master, rights = _master_with(tmp_path, backoff_initial_ms=500, backoff_max_ms=500)
    try:
        master.add("x", T0 - 10, topic=DENIED)
        master.add("a", T0 - 9)
        master.loop.step()
        assert master.publisher.calls == ["begin", "commit"]
        assert master.delivered() == ["a"] and master.delivered(DENIED) == []
        assert master.publisher.visible_on(master.spec.dead_letter_topic) == []
        (state,) = _states(master)
        assert (state.message_id, state.slot_ms) == ("x", T0 + 500)
        assert state.message is not None and state.message.due_ms == T0 - 10
        (index,) = master.store.get_index(["x"])
        assert index is not None and keys.slot_of(index[1:]) == T0 + 500
        record = master.attempts.of("x")
        assert record is not None and (record.attempts, record.retry_at_ms) == (1, T0 + 500)
        master.add("b", T0 + 100)
        master.clock.advance(100)
        master.loop.step()
        assert master.delivered() == ["a", "b"]
        assert len(rights.asked) == 1  # x not tried (nor asked about) before its slot
        rights.denied.clear()
        master.clock.advance(1_000)  # its slot, and the refusal's hold, passed
        master.loop.step()
        assert rights.asked[1:] == [{DENIED}]
        assert master.delivered(DENIED) == ["x"]
    finally:
        master.store.close()


def test_a_topic_refused_after_its_first_sight_aborts_once_and_the_redo_defers_it(
    tmp_path: Path,
) -> None:
    """Inside a transaction Kafka names no refused topic: the records come back purged, and
    Kafka is asked which of their topics it refuses. Mutants caught: the purge taken for an
    outage (the range retried for as long as the refusal lasts), the redo waiting the
    transactions' backoff."""
    master, rights = _master_with(tmp_path, backoff_initial_ms=500, backoff_max_ms=500)
    try:
        rights.denied = set()
        master.add("first", T0 - 20, topic=DENIED)
        master.loop.step()
        assert master.delivered(DENIED) == ["first"]
        rights.denied = {DENIED}  # the ACL came afterwards
        master.add("x", T0 - 10, topic=DENIED)
        master.add("a", T0 - 9)
        master.clock.advance(1)
        master.loop.step()
        master.loop.step()
        assert master.publisher.calls[2:] == ["begin", "abort", "begin", "commit"]
        assert master.metrics.totals()["transactions_redone"] == 1
        assert master.delivered() == ["a"]
        (state,) = _states(master)
        assert (state.message_id, state.slot_ms) == ("x", T0 + 501)
    finally:
        master.store.close()


def test_records_refused_after_the_transaction_went_bad_are_not_judged(
    tmp_path: Path,
) -> None:
    """Once a transaction is in error librdkafka refuses every further produce with
    ``_STATE``: that says nothing about the record. Mutant caught: ``_STATE`` judged as the
    record's own (healthy messages deferred, their attempts counted)."""
    master, rights = _master_with(tmp_path, backoff_initial_ms=500, max_attempts=1)
    try:
        rights.denied = set()
        master.publisher.outcome = lambda r: None
        master.publisher.at_once = lambda r: (
            KafkaError(KafkaError._STATE) if r.topic == TARGET else None
        )
        master.add("a", T0 - 10)
        master.loop.step()
        assert master.publisher.calls == ["begin", "abort"]
        assert master.attempts.of("a") is None and _states(master) == []
        assert "transactions_redone" not in master.metrics.totals()
        master.publisher.at_once = lambda r: None
        master.loop.step()
        assert master.delivered() == ["a"]
    finally:
        master.store.close()


def test_a_maximum_age_ends_the_retries_in_the_dead_letter_topic(tmp_path: Path) -> None:
    master, rights = _master_with(
        tmp_path, max_age_s=10, backoff_initial_ms=4_000, backoff_max_ms=4_000
    )
    try:
        master.add("x", T0 - 10, topic=DENIED)
        for _ in range(4):  # attempts at T0, T0+4 s, T0+8 s: deferred; T0+12 s: too old
            master.loop.step()
            master.clock.advance(4_000)
        assert master.publisher.calls == ["begin", "commit"] * 4
        (dead,) = master.publisher.visible_on(master.spec.dead_letter_topic)
        reason = dead.header(H_DLQ_REASON) or b""
        assert reason.startswith(b"gave up after 4 attempts, 12010 ms past its due time")
        assert master.delivered(DENIED) == []
    finally:
        master.store.close()


def test_a_purge_kafka_explains_with_no_refused_topic_is_retried_as_an_outage(
    tmp_path: Path,
) -> None:
    """Mutant caught: every purged record deferred (an outage would move every message of
    the range to a later slot)."""
    master, rights = _master_with(tmp_path, backoff_initial_ms=500)
    try:
        master.add("x", T0 - 10, topic=DENIED)
        real = set(rights.denied)
        rights.denied = set()
        master.publisher.outcome = lambda r: (
            KafkaError(KafkaError._PURGE_QUEUE) if r.topic in real else None
        )
        master.loop.step()
        master.loop.step()
        assert master.publisher.calls == ["begin", "abort", "begin", "abort"]
        assert _states(master) == [] and master.attempts.of("x") is None
        assert "transactions_redone" not in master.metrics.totals()
    finally:
        master.store.close()


#: A rate of 10 msg/s with a burst of 2: a token every 100 ms.
TEN_A_SECOND = Policies({TARGET: TopicPolicy(rate=10, burst=2)})


def planned_slots(master: Master) -> dict[str, int]:
    """Where each message still to deliver lies now (after the seek), by id."""
    start = keys.slot_bound(master.ledger.seek_ms + 1)
    rows = master.store.scan(start, keys.slot_bound(T0 + 10**9), 1000)
    return {codec.decode(raw).id: keys.slot_of(key) for key, raw in rows}


def test_a_limited_topic_over_its_rate_waits_in_later_slots_in_due_order(tmp_path: Path) -> None:
    """Mutants caught: planned messages charged again at their slot (each moved again, never
    delivered); the plan not moved on by a planned message (two in one slot)."""
    master = make_master(tmp_path, policies=TEN_A_SECOND)
    for n in range(5):
        master.add(f"m{n}", T0 - 50 + n)
    master.add("other", T0 - 10, topic=DENIED)
    master.loop.step()
    assert master.delivered() == ["m0", "m1"]  # the burst
    assert master.delivered(DENIED) == ["other"]  # another topic is not held back
    assert planned_slots(master) == {"m2": T0 + 100, "m3": T0 + 200, "m4": T0 + 300}
    (cut,) = master.cuts()
    assert cut.paced == {TARGET: T0 + 500}
    for _ in range(3):
        master.clock.advance(100)
        master.loop.step()
    assert master.delivered() == ["m0", "m1", "m2", "m3", "m4"]
    assert planned_slots(master) == {}
    lateness = master.metrics.histograms()[f"topic_lateness_ms:{TARGET}"]
    # m0, m1 at T0, m2-m4 at their slots; each due T0 - 50 + n.
    assert (sum(lateness.buckets), lateness.sum_ms) == (5, 50 + 49 + 148 + 247 + 346)
    master.add("late", T0 + 300)  # the plan's end passed: the rate lets it out at once
    master.clock.advance(200)
    master.loop.step()
    assert master.delivered()[-1] == "late"


def test_messages_planned_into_one_slot_go_in_due_order(tmp_path: Path) -> None:
    """Stored in id order within a slot, they would not be. Mutant caught: no due-order sort."""
    policies = Policies({TARGET: TopicPolicy(rate=4000, burst=1)})
    master = make_master(tmp_path, policies=policies)
    ids = [f"{chr(ord('z') - n)}{n}" for n in range(9)]  # ids in reverse of due order
    for n, message_id in enumerate(ids):
        master.add(message_id, T0 - 20 + n)
    master.loop.step()
    assert master.delivered() == ids[:1]
    assert set(planned_slots(master).values()) == {T0 + 1, T0 + 2}  # four to a slot
    master.clock.advance(5)
    master.loop.step()
    assert master.delivered() == ids


def test_an_aborted_transaction_plans_nothing(tmp_path: Path) -> None:
    """Mutant caught: the plan not rolled back (the redo planned each message a slot later
    and the rate fell below its setting)."""
    master = make_master(tmp_path, policies=TEN_A_SECOND)
    for n in range(4):
        master.add(f"m{n}", T0 - 50 + n)
    master.publisher.fail_next("commit", TransactionAborted("CONCURRENT_TRANSACTIONS"))
    master.loop.step()
    assert master.delivered() == []
    master.loop.step()
    assert master.delivered() == ["m0", "m1"]
    assert planned_slots(master) == {"m2": T0 + 100, "m3": T0 + 200}


def test_a_successor_keeps_the_plan_and_lets_the_backlog_go_at_its_slots(tmp_path: Path) -> None:
    """A takeover neither lets new messages jump the backlog (a fresh bucket would) nor plans
    the backlog again. Mutants caught: ``paced`` not carried by the cut; the inherited backlog
    charged again."""
    first = make_master(tmp_path, policies=TEN_A_SECOND)
    for n in range(4):
        first.add(f"m{n}", T0 - 50 + n)
    first.loop.step()
    (cut,) = first.cuts()
    successor = make_master(
        tmp_path, policies=TEN_A_SECOND, paced=dict(cut.paced), store=first.store
    )
    successor.offset = first.offset
    successor.add("new", T0 + 50)
    successor.clock.advance(200)
    successor.loop.step()
    assert successor.delivered() == ["m2", "m3"]
    assert planned_slots(successor) == {"new": T0 + 300}
    successor.clock.advance(100)
    successor.loop.step()
    assert successor.delivered() == ["m2", "m3", "new"]


def test_a_missing_topic_under_a_retry_policy_is_deferred_then_delivered_once_created(
    tmp_path: Path,
) -> None:
    """Mutant caught: ``TopicMissing`` not deferred (the master dead-lettered it, or raised on
    it as if it were a reason)."""
    topics = {"nowhere": TopicPolicy(max_attempts=5, backoff_initial_ms=400, backoff_max_ms=400)}
    retry = RETRY.model_copy(update={"topics": topics})
    master = make_master(tmp_path, retry=retry, fake_monotonic=True)
    master.add("waits", T0 - 10, topic="nowhere")
    master.add("kept", T0 - 9)
    master.loop.step()  # the first "unknown": asked again a second later
    master.clock.advance(1_000)
    master.loop.step()
    assert master.delivered() == ["kept"]
    assert planned_slots(master) == {"waits": T0 + 1_400}  # its next attempt's slot
    record = master.attempts.of("waits")
    assert record is not None and record.attempts == 1
    topics_known = master.publisher.topics
    assert topics_known is not None
    topics_known.add("nowhere")
    master.clock.advance(1_400)
    master.loop.step()
    assert master.delivered("nowhere") == ["waits"]
    assert master.publisher.visible_on(master.spec.dead_letter_topic) == []


def test_a_burst_due_later_is_planned_before_it_falls_due(tmp_path: Path) -> None:
    """The rate's look-ahead (``group.rate_lookahead_ms``): messages due in 5 s are moved to
    their slots now, so at due time the master only delivers them. Mutants caught: no
    look-ahead (nothing moved before due); ``ahead_ms`` not carried by the cut."""
    master = make_master(tmp_path, policies=TEN_A_SECOND)
    for n in range(6):
        master.add(f"m{n}", T0 + 5000)
    master.loop.step()
    assert master.delivered() == []
    assert planned_slots(master) == {
        "m0": T0 + 5000,
        "m1": T0 + 5000,  # the burst stays where it is
        **{f"m{n}": T0 + 5000 + 100 * (n - 1) for n in range(2, 6)},
    }
    (cut,) = master.cuts()
    assert cut.ahead_ms == T0 + 5000  # read up to the last message stored
    moves = len(_states(master))
    master.clock.advance(5000)
    master.loop.step()
    assert master.delivered() == ["m0", "m1"]
    for _ in range(4):
        master.clock.advance(100)
        master.loop.step()
    assert master.delivered() == [f"m{n}" for n in range(6)]
    assert len(_states(master)) == moves  # nothing moved again at due time


def test_what_changed_between_the_look_ahead_and_its_commit_keeps_the_change(
    tmp_path: Path,
) -> None:
    """A cancel and a reschedule applied between the look-ahead's read and the commit that
    moves their messages: the master's store keeps them cancelled and rescheduled, and the
    reschedules go to the backups in the next transaction. Mutants caught: the master's own
    store applying a look-ahead move whatever it holds now (m3 back at its planned slot);
    one that checks the bytes only (m4, rescheduled to its own time, at its planned slot on
    the master and at its own on the backups: a review found it)."""
    master = make_master(tmp_path, policies=TEN_A_SECOND)
    for n in range(5):
        master.add(f"m{n}", T0 + 5000)
    begin = master.publisher.begin

    def begin_after_changes() -> None:
        changes = [
            (Op.CANCEL, "m2", 0, None),
            (Op.RESCHEDULE, "m3", T0 + 8000, None),
            (Op.RESCHEDULE, "m4", T0 + 5000, None),  # to its own time: the same bytes
        ]
        offsets = [(0, master.offset + n) for n in range(3)]
        master.ledger.apply_decoded(changes, {0: master.offset + 3}, offsets)
        master.offset += 3
        begin()

    master.publisher.begin = begin_after_changes  # type: ignore[method-assign]
    master.loop.step()
    master.publisher.begin = begin  # type: ignore[method-assign]
    moved = {st.message_id: st.slot_ms for st in _states(master)}
    assert moved["m3"] == T0 + 5200  # the look-ahead's move went out ...
    assert planned_slots(master) == {
        "m0": T0 + 5000,
        "m1": T0 + 5000,
        "m3": T0 + 8000,  # ... but this store kept the reschedules
        "m4": T0 + 5000,
    }
    master.clock.advance(10)
    master.loop.step()
    later = {st.message_id: st.slot_ms for st in _states(master)[len(moved) :]}
    assert later == {"m3": T0 + 8000, "m4": T0 + 5000}  # the backups follow them
    master.clock.advance(8000)
    master.loop.step()
    assert master.delivered() == ["m0", "m1", "m4", "m3"]


def test_moves_read_ahead_wait_for_a_cut_that_covers_their_adds(tmp_path: Path) -> None:
    """A backup applies a cut only once its own ingest stored every add below the cut's
    offsets (``group/follower.py``): a move of a message the cut does not cover could reach
    it before the message. When the frontier did not move since the read, its cut is older
    than the read, and raising its offsets would count as delivered an add that was already
    due when it arrived (stored past the frontier, due before it): the moves wait for the
    next transaction. Mutant caught: the cut's offsets raised to the read's (a review found
    ``late`` then lost on a takeover)."""
    master = make_master(tmp_path, policies=TEN_A_SECOND)
    master.loop.step()  # the frontier at T0
    late_offset = master.offset
    master.add("late", T0 - 500)  # due already: stored at T0 + 1
    for n in range(4):
        master.add(f"m{n}", T0 + 5000)
    master.loop.step()  # the clock did not move: neither did the frontier
    assert master.delivered() == []
    assert _states(master) == []
    assert all(cut.offsets.get(0, 0) <= late_offset for cut in master.cuts())
    master.clock.advance(1)
    master.loop.step()
    assert master.delivered() == ["late"]
    assert {st.message_id for st in _states(master)} == {"m2", "m3"}
    assert master.cuts()[-1].offsets == {0: master.offset}


class Monotonic:
    """The transaction loop's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_while_deliveries_flow_the_next_transaction_lingers(
    master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutants: ``linger_s`` ignored (the fourth message goes at once); the linger applied
    after a transaction of one message (the second and third wait for it)."""
    monotonic = Monotonic()
    monkeypatch.setattr("chronos.group.transactions.time.monotonic", monotonic)
    loop = TransactionLoop(
        spec=master.spec,
        publisher=master.publisher,
        lanes=master.loop.lanes,
        retry=RETRY,
        clock=master.clock,
        metrics=master.metrics,
        linger_s=60.0,
    )
    # Only the stop event (not the loop's stop, which ends its publisher): every wait of the
    # loop returns at once, and a step that waits returns without a transaction.
    LoopWorker.stop(loop)
    master.add("a", T0 - 10)
    loop.step()
    assert master.delivered() == ["a"]
    # Each later message is placed behind the committed frontier (T0): due once it moved on.
    master.add("b", T0 + 1)
    master.add("c", T0 + 2)
    master.clock.advance(10)
    loop.step()
    assert master.delivered() == ["a", "b", "c"], "one message carried: no linger"
    master.add("d", T0 + 11)
    master.clock.advance(10)
    monotonic.now += 59.0
    loop.step()
    assert master.delivered() == ["a", "b", "c"], "two carried: the next waits its linger"
    monotonic.now += 1.0
    loop.step()
    assert master.delivered() == ["a", "b", "c", "d"]

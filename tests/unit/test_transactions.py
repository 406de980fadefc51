"""The master's transaction loop against the stub publisher and a real RocksDB.

Each test names the mutant it was seen to catch (the code changed, the test failed, the change
undone).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.clock import FakeClock
from chronos.delivery.deadletter import DeadLetterPolicy
from chronos.group.placement import ReplicaPlacement, ReplicaStore
from chronos.group.spec import GroupSpec
from chronos.group.transactions import MasterState, TransactionLoop
from chronos.kafka.errors import Fenced, NotAuthorized, TransactionAborted
from chronos.kafka.publishers.stub import StubPublisher
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.schedule.frontier import Frontier
from chronos.schedule.ledger import Ledger
from chronos.schedule.progress_record import Cut, decode
from chronos.settings import ChronosSettings, DeleteSettings, DeliverySettings, StoreSettings
from chronos.store import codec
from chronos.store.rocks import RocksStore
from chronos.wire import H_DLQ_REASON, H_ID

T0 = 1_700_000_000_000
TARGET = "orders"


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
    offset: int = 0

    def add(self, message_id: str, due_ms: int, topic: str = TARGET) -> None:
        message = DelayMessage(message_id, topic, b"k", b"v", [], due_ms)
        item = (message_id, due_ms, codec.encode(message))
        self.ledger.apply_decoded([item], {0: self.offset + 1}, [(0, self.offset)])
        self.offset += 1

    def delivered(self, topic: str = TARGET) -> list[str]:
        """Ids a read_committed consumer of ``topic`` sees, in order."""
        return [(r.header(H_ID) or b"").decode() for r in self.publisher.visible_on(topic)]

    def cuts(self) -> list[Cut]:
        records = self.publisher.visible_on(self.spec.progress_topic)
        return [c for c in (decode(r.key, r.value) for r in records) if isinstance(c, Cut)]


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    settings = ChronosSettings.model_validate(
        {
            "topics": {"namespace": "ns"},
            "group": {"name": "g", "transaction_interval_ms": 0, "progress_interval_ms": 10},
        }
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    store = RocksStore(tmp_path, StoreSettings(wal_sync_interval_ms=60_000))
    clock, metrics = FakeClock(T0), CountingMetrics()
    frontier = Frontier(0)
    placement = ReplicaPlacement()
    ledger = Ledger(store, frontier, clock, DeleteSettings(), placement)
    replica = ReplicaStore(store, frontier, ledger, placement)
    replica.lead(T0 - 1000, [0])
    publisher = StubPublisher(topics={TARGET, spec.dead_letter_topic, spec.progress_topic})
    retry = DeliverySettings(retry_backoff_initial_ms=1, retry_backoff_max_ms=1, give_up_after_s=5)
    fenced: list[str] = []
    fatal: list[str] = []
    loop = TransactionLoop(
        spec,
        publisher,
        store,
        ledger,
        replica,
        frontier,
        DeadLetterPolicy.of(retry.give_up_after_s, publisher),
        retry,
        clock,
        metrics,
        MasterState(7, fenced.append, fatal.append),
    )
    yield Master(store, ledger, publisher, clock, metrics, spec, loop, fenced, fatal)
    store.close()


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

"""Sender: acknowledgements, retries off the queue, dead letters, giving up (fake producer)."""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import cast

import pytest
from confluent_kafka import KafkaError

from chronos.clock import FakeClock
from chronos.delivery.attempts import Attempts, AttemptsRecord
from chronos.delivery.deadletter import DeadLetterPolicy, DeadLetters
from chronos.delivery.job import DeliveryJob
from chronos.delivery.pacing import Pacing
from chronos.delivery.policies import Policies
from chronos.kafka.publishers.stub import StubPublisher, StubRecord
from chronos.lifecycle import Fatal
from chronos.metrics import CountingMetrics
from chronos.model import DelayMessage
from chronos.node import sender as sender_module
from chronos.node.progress import ProgressTracker
from chronos.node.sender import RetrySchedule, Sender
from chronos.settings import DeliverySettings, TopicPolicy
from chronos.store import keys
from chronos.wire import H_DLQ_REASON, H_DLQ_TARGET, H_DLQ_TRUNCATED, H_ID

T0 = 1_700_000_000_000


@dataclass
class Env:
    clock: FakeClock
    publisher: StubPublisher
    tracker: ProgressTracker
    retries: RetrySchedule
    jobs: queue.Queue[list[DeliveryJob]]
    metrics: CountingMetrics
    sender: Sender
    fatal: Fatal
    attempts: Attempts

    @property
    def sent(self) -> list[StubRecord]:
        return self.publisher.published

    def reply(self, index: int, error: KafkaError | None = None) -> None:
        """Kafka's answer to the record published ``index``-th."""
        self.publisher.answer(self.publisher.published[index], error)


DEFAULTS = DeliverySettings(
    retry_backoff_initial_ms=100, retry_backoff_max_ms=1000, give_up_after_s=5
)


@pytest.fixture
def env() -> Env:
    return make_env(DEFAULTS)


def make_env(settings: DeliverySettings) -> Env:
    clock, publisher, metrics = FakeClock(T0), StubPublisher(), CountingMetrics()
    tracker, retries = ProgressTracker(0, metrics, clock), RetrySchedule()
    jobs: queue.Queue[list[DeliveryJob]] = queue.Queue()
    fatal = Fatal()
    dead = DeadLetters(publisher, "ns.deadletter", metrics, fatal.report)
    policy = DeadLetterPolicy(
        settings,
        lambda topic: publisher.topic_exists(topic, 1.0),
        monotonic=lambda: clock.now_ms() / 1000,
    )
    attempts = Attempts()
    pacing = Pacing(Policies(settings.topics), metrics, lambda: (clock.now_ms() - T0) / 1000)
    sender = Sender(
        index=0,
        jobs=jobs,
        retries=retries,
        publisher=publisher,
        dead_letters=dead,
        policy=policy,
        tracker=tracker,
        clock=clock,
        metrics=metrics,
        attempts=attempts,
        pacing=pacing,
        drain_timeout_s=0.2,
    )
    return Env(clock, publisher, tracker, retries, jobs, metrics, sender, fatal, attempts)


def job(message_id: str = "m1") -> DeliveryJob:
    message = DelayMessage(message_id, "orders", b"k", b"v", [("h", b"1")], T0)
    return DeliveryJob(keys.message_key(T0, message_id), message, T0)


def test_acknowledged_job_completes(env: Env) -> None:
    first = job()
    env.tracker.dispatched([first])
    env.jobs.put([first])
    env.sender.step()
    (sent,) = env.sent
    assert (sent.topic, sent.key, sent.value) == ("orders", b"k", b"v")
    assert ("h", b"1") in sent.headers and (H_ID, b"m1") in sent.headers
    assert not first.done
    env.reply(0)
    assert first.done and first.message is None  # the payload is dropped at once
    env.tracker.scanned_through(T0)
    assert env.tracker.collect()[::2] == (T0, [])
    assert env.metrics.totals()["delivered"] == 1


def test_transient_error_retries_with_backoff_without_blocking_others(env: Env) -> None:
    failing, other = job("fail"), job("other")
    env.jobs.put([failing])
    env.sender.step()
    env.reply(0, KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not failing.done and len(env.retries) == 1
    env.jobs.put([other])
    env.sender.step()  # the retry is not due yet; the other message goes out
    assert [dict(s.headers)[H_ID] for s in env.sent] == [b"fail", b"other"]
    env.clock.advance(100)
    env.sender.step()
    assert len(env.sent) == 3 and env.sent[2].topic == "orders"
    env.reply(2)
    assert failing.done


def test_permanent_error_is_dead_lettered_with_reason_and_target(env: Env) -> None:
    doomed = job()
    env.jobs.put([doomed])
    env.sender.step()
    env.reply(0, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert len(env.sent) == 1  # nothing is produced from inside a callback
    env.sender.step()
    dead = env.sent[1]
    assert dead.topic == "ns.deadletter" and dead.value == b"v"
    headers = dict(dead.headers)
    assert headers[H_DLQ_TARGET] == b"orders"
    assert b"MSG_SIZE_TOO_LARGE" in (headers[H_DLQ_REASON] or b"")
    assert not doomed.done  # done only once the dead-letter topic acknowledged
    env.reply(1)
    assert doomed.done and env.metrics.totals()["dead_lettered"] == 1


def test_dead_letter_refused_for_size_is_resent_without_value_and_never_dropped(env: Env) -> None:
    doomed = job()
    env.jobs.put([doomed])
    env.sender.step()
    env.reply(-1, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    env.sender.step()
    env.reply(-1, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))  # DLQ refuses too
    env.sender.step()
    truncated = env.sent[-1]
    assert truncated.value is None and truncated.key == b"k"
    truncated_sizes = cast(bytes, dict(truncated.headers)[H_DLQ_TRUNCATED])
    assert truncated_sizes.startswith(b"value=1 key=1 headers=")
    assert ("h", b"1") in truncated.headers
    env.reply(-1, KafkaError(KafkaError.KAFKA_STORAGE_ERROR))
    assert not doomed.done, "completed without any acknowledgement"
    env.clock.advance(1_000)
    env.sender.step()
    env.reply(-1)
    assert doomed.done


def test_outage_errors_are_retried_past_the_give_up_time(env: Env) -> None:
    waiting = job()
    env.jobs.put([waiting])
    env.sender.step()
    for _ in range(5):
        env.reply(-1, KafkaError(KafkaError._TRANSPORT))
        env.clock.advance(10_000)  # well past give_up_after_s=5
        env.sender.step()
    assert all(sent.topic == "orders" for sent in env.sent)
    env.reply(-1)
    assert waiting.done


def test_a_broker_gone_under_many_jobs_writes_one_retry_line(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job in flight fails at once when the broker goes: one ``delivery_retry`` line
    (the real clock's window), every job still retried and counted. Mutant caught: a line per
    job (87 in one second with the broker killed under 1,000 msg/s)."""
    jobs = [job(f"m{n}") for n in range(50)]
    env.jobs.put(jobs)
    env.sender.step()
    written: list[str] = []
    monkeypatch.setattr(sender_module.log, "warning", lambda event, **_: written.append(event))
    for n in range(50):
        env.reply(n, KafkaError(KafkaError._TRANSPORT))
    assert written == ["delivery_retry"]
    assert env.metrics.totals()["retried"] == 50 and len(env.retries) == 50


def test_gives_up_on_a_record_specific_error_after_the_configured_time(env: Env) -> None:
    stuck = job()
    env.jobs.put([stuck])
    env.sender.step()
    env.reply(-1, KafkaError(KafkaError.KAFKA_STORAGE_ERROR))
    env.clock.advance(6_000)
    env.sender.step()  # retry is due: produced again, fails again, now past give-up
    env.reply(-1, KafkaError(KafkaError.KAFKA_STORAGE_ERROR))
    env.sender.step()
    dead = env.sent[-1]
    assert dead.topic == "ns.deadletter"
    assert (dict(dead.headers)[H_DLQ_REASON] or b"").startswith(b"gave up after 2 attempts")


def test_lateness_of_a_late_arrival_counts_from_when_it_was_stored(env: Env) -> None:
    """deliver_at_ms=0 is stored at the frontier (its slot): lateness from the slot, not 1970."""
    message = DelayMessage("past", "orders", None, b"v", [], 0)
    overdue = DeliveryJob(keys.message_key(T0 - 5, "past"), message, 0)
    env.tracker.dispatched([overdue])
    env.jobs.put([overdue])
    env.sender.step()
    assert env.metrics.summaries()["send_lateness_ms"]["max"] == 5


def test_a_stopping_sender_retries_what_waits_for_a_retry(env: Env) -> None:
    """A job left in the retries holds the seek: everything delivered after it would be
    delivered again at the next start (SIGTERM during a burst)."""
    waiting, later = job("waiting"), job("later")
    env.tracker.dispatched([waiting, later])
    env.jobs.put([waiting, later])
    env.sender.step()
    env.reply(0, KafkaError(KafkaError._MSG_TIMED_OUT))  # to the retries
    env.reply(1)
    env.sender.stop()
    env.sender.finish()
    assert [dict(s.headers)[H_ID] for s in env.sent] == [b"waiting", b"later", b"waiting"]
    env.reply(2)
    env.tracker.scanned_through(T0)
    assert env.tracker.collect()[0] == T0  # the seek passes both


def test_a_fenced_producer_is_reported_and_the_job_retried_not_dead_lettered(env: Env) -> None:
    """After an outage Tansu fences librdkafka's epoch bump for good: the producer is replaced
    (IdempotentPublisher.note_error) and the job goes out again on the new one."""
    fenced = job()
    env.tracker.dispatched([fenced])
    env.jobs.put([fenced])
    env.sender.step()
    env.clock.advance(10_000)  # past give_up_after_s: still not dead-lettered
    env.reply(0, KafkaError(KafkaError.PRODUCER_FENCED))
    assert [e.code() for e in env.publisher.noted] == [KafkaError.PRODUCER_FENCED]
    env.clock.advance(1_000)
    env.sender.step()
    assert env.sent[-1].topic == "orders"  # retried on its target
    assert fenced.dead_reason is None


def test_a_target_topic_kafka_does_not_know_is_dead_lettered_without_a_try(env: Env) -> None:
    """The same rule as a master's transactions (one policy): an unknown topic is refused up
    front, once Kafka said so twice a second apart, not after librdkafka's metadata timeout
    (30 s) held the seek."""
    env.publisher.topics = {"elsewhere"}
    lost = job()
    env.tracker.dispatched([lost])
    env.jobs.put([lost])
    env.sender.step()
    assert env.sent == [] and len(env.retries) == 1  # asked again in a second
    env.clock.advance(1_000)
    env.sender.step()
    (dead,) = env.sent
    assert dead.topic == "ns.deadletter"
    assert (dead.header(H_DLQ_REASON) or b"").startswith(b"UNKNOWN_TOPIC_OR_PART")
    assert dead.header(H_DLQ_TARGET) == b"orders"


def test_a_topic_the_cluster_creates_on_demand_is_delivered_to(env: Env) -> None:
    """Apache Kafka (auto.create.topics.enable) creates a topic when a producer first asks for
    it, and answers that first question "unknown": the job waits for the second answer."""
    env.publisher.topics = {"elsewhere"}
    fresh = job()
    env.jobs.put([fresh])
    env.sender.step()
    assert env.sent == []
    env.publisher.topics.add("orders")  # created by the first question
    env.clock.advance(1_000)
    env.sender.step()
    (delivered,) = env.sent
    assert delivered.topic == "orders" and fresh.attempts == 1


def test_a_dead_letter_topic_chronos_may_not_write_ends_the_node(env: Env) -> None:
    doomed = job()
    env.jobs.put([doomed])
    env.sender.step()
    env.reply(0, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    env.sender.step()
    env.reply(1, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert env.fatal.reason is not None and "ns.deadletter" in env.fatal.reason
    assert not doomed.done, "completed without any acknowledgement"


def _denied() -> KafkaError:
    return KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)


def _policy(**policy: object) -> DeliverySettings:
    return DEFAULTS.model_copy(update={"topics": {"orders": TopicPolicy.model_validate(policy)}})


def test_without_a_policy_a_topic_chronos_may_not_write_is_dead_lettered_at_once(
    env: Env,
) -> None:
    doomed = job()
    env.jobs.put([doomed])
    env.sender.step()
    env.reply(0, _denied())
    env.sender.step()
    assert env.sent[1].topic == "ns.deadletter"
    assert b"TOPIC_AUTHORIZATION_FAILED" in (dict(env.sent[1].headers)[H_DLQ_REASON] or b"")


def test_a_topic_policy_retries_a_refusal_with_its_backoff_until_its_attempts_run_out() -> None:
    """Mutants caught: the policy's backoff ignored (the default 100 ms), ``max_attempts``
    off by one, the attempts not kept for the status lookup."""
    env = make_env(_policy(max_attempts=3, backoff_initial_ms=400, backoff_max_ms=600))
    refused = job()
    env.jobs.put([refused])
    env.sender.step()
    env.reply(0, _denied())
    assert env.attempts.of("m1") == AttemptsRecord(
        1, "TOPIC_AUTHORIZATION_FAILED: Broker: Topic authorization failed", T0, T0 + 400
    )
    env.clock.advance(399)
    env.sender.step()
    assert len(env.sent) == 1  # not before its backoff
    env.clock.advance(1)
    env.sender.step()
    env.reply(1, _denied())
    env.clock.advance(600)  # doubled, capped at backoff_max_ms
    env.sender.step()
    assert [r.topic for r in env.sent] == ["orders"] * 3
    env.reply(2, _denied())
    env.sender.step()
    dead = env.sent[3]
    assert dead.topic == "ns.deadletter"
    reason = dict(dead.headers)[H_DLQ_REASON] or b""
    assert reason.startswith(b"gave up after 3 attempts (max_attempts): TOPIC_AUTHORIZATION")
    record = env.attempts.of("m1")
    assert record is not None and (record.attempts, record.retry_at_ms) == (3, None)


def test_a_topic_policy_delivers_once_the_topic_takes_it() -> None:
    env = make_env(_policy(backoff_initial_ms=100))
    refused = job()
    env.jobs.put([refused])
    env.sender.step()
    env.reply(0, _denied())
    env.clock.advance(100)
    env.sender.step()
    env.reply(1)  # allowed now
    assert refused.done and env.metrics.totals().get("dead_lettered", 0) == 0


def test_a_maximum_age_counts_from_the_due_time() -> None:
    """Mutant caught: the age counted from the first attempt (a message already late when
    first tried got its whole age again)."""
    env = make_env(_policy(max_age_s=10, backoff_initial_ms=4_000, backoff_max_ms=4_000))
    late = job()
    env.clock.advance(5_000)  # first tried 5 s after its due time
    env.jobs.put([late])
    env.sender.step()
    env.reply(0, _denied())
    env.clock.advance(4_000)
    env.sender.step()
    env.reply(1, _denied())  # 9 s past due: tried again
    env.clock.advance(4_000)
    env.sender.step()
    assert [r.topic for r in env.sent] == ["orders"] * 3
    env.reply(2, _denied())  # 13 s past due
    env.sender.step()
    reason = dict(env.sent[3].headers)[H_DLQ_REASON] or b""
    assert b"13000 ms past its due time (max_age_s 10)" in reason


def test_a_policy_of_a_rate_alone_leaves_the_retries_as_without_one() -> None:
    """Mutant caught: any policy turning retries on (a rate for every topic made each
    refusal retry for give_up_after_s instead of going to the dead-letter topic)."""
    env = make_env(_policy(rate=1000))
    refused = job()
    env.jobs.put([refused])
    env.sender.step()
    env.reply(0, _denied())
    env.sender.step()
    assert env.sent[1].topic == "ns.deadletter"


def test_the_policy_of_every_topic_covers_a_topic_without_its_own() -> None:
    everyone = TopicPolicy(max_attempts=2)
    env = make_env(DEFAULTS.model_copy(update={"topics": {"*": everyone}}))
    refused = job()
    env.jobs.put([refused])
    env.sender.step()
    env.reply(0, _denied())
    env.clock.advance(100)
    env.sender.step()
    assert env.sent[1].topic == "orders"  # retried, not dead-lettered at once


def test_an_outage_is_never_a_reason_to_give_up_whatever_the_policy() -> None:
    env = make_env(_policy(max_attempts=1, max_age_s=1))
    waiting = job()
    env.jobs.put([waiting])
    env.sender.step()
    env.reply(0, KafkaError(KafkaError._MSG_TIMED_OUT))
    env.clock.advance(10_000)
    env.sender.step()
    assert [r.topic for r in env.sent] == ["orders", "orders"]


def test_a_topic_with_a_rate_waits_in_order_and_holds_back_no_other_topic() -> None:
    """Mutants caught: the held jobs never released by the senders' loop, a retry paced again
    (behind messages due after it)."""
    env = make_env(_policy(rate=1000, burst=2, backoff_initial_ms=1, backoff_max_ms=1))
    limited = [job(f"m{n}") for n in range(5)]
    other = DeliveryJob(
        keys.message_key(T0, "o"), DelayMessage("o", "audit", None, b"v", [], T0), T0
    )
    env.jobs.put([*limited, other])
    env.sender.step()
    assert [dict(r.headers)[H_ID] for r in env.sent] == [b"m0", b"m1", b"o"]
    env.clock.advance(2)
    env.sender.step()
    assert [dict(r.headers)[H_ID] for r in env.sent[3:]] == [b"m2", b"m3"]
    env.reply(3, KafkaError(KafkaError._MSG_TIMED_OUT))  # m2 fails: retried, not paced again
    env.clock.advance(1)  # the retry is due, and one token came: m4's
    env.sender.step()
    assert sorted(dict(r.headers)[H_ID] or b"" for r in env.sent[5:]) == [b"m2", b"m4"]
    assert "topic_lateness_ms:orders" in env.metrics.histograms()


def test_a_missing_topic_under_a_retry_policy_is_retried_until_created() -> None:
    """A topic someone creates within the policy's budget gets its messages; without a policy
    it would have been dead-lettered at the second look. Mutant caught: ``TopicMissing``
    dead-lettered (``reason_after`` judging it a record error)."""
    env = make_env(_policy(max_attempts=5, backoff_initial_ms=400, backoff_max_ms=400))
    env.publisher.topics = {"elsewhere"}
    waiting = job()
    env.jobs.put([waiting])
    env.sender.step()
    env.clock.advance(1_000)  # the second look confirms it missing: attempt 1
    env.sender.step()
    record = env.attempts.of("m1")
    assert record is not None and record.attempts == 1 and "UNKNOWN_TOPIC" in record.last_error
    assert env.sent == [] and waiting.dead_reason is None
    env.publisher.topics.add("orders")
    env.clock.advance(1_200)  # past the backoff and the re-check of a missing topic
    env.sender.step()
    env.sender.step()
    (delivered,) = env.sent
    assert delivered.topic == "orders"


def test_a_missing_topic_under_a_retry_policy_is_dead_lettered_when_its_attempts_run_out() -> None:
    env = make_env(_policy(max_attempts=2, backoff_initial_ms=400, backoff_max_ms=400))
    env.publisher.topics = {"elsewhere"}
    env.jobs.put([job()])
    env.sender.step()
    for _ in range(3):
        env.clock.advance(1_000)
        env.sender.step()
    (dead,) = env.sent
    assert dead.topic == "ns.deadletter"
    reason = dict(dead.headers)[H_DLQ_REASON] or b""
    assert reason.startswith(b"gave up after 2 attempts (max_attempts): UNKNOWN_TOPIC_OR_PART")

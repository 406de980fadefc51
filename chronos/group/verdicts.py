"""What a master remembers of failed deliveries between its transactions: the policy's
verdicts (dead-letter, defer, try again), and which target topics Kafka refuses.

Shared by the three steps of a delivery transaction (``plan.py``, ``execute.py``,
``commit.py``): planning reads it (a deferred message waits, a refused topic's message is
judged), publishing and aborting add to it, a commit settles what the transaction tried.
It outlives one transaction (the redo after an abort reads what the abort judged) and dies
with the master's term.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from chronos.clock import Clock
from chronos.delivery.attempts import Attempts, AttemptsRecord
from chronos.delivery.deadletter import DeadLetterPolicy, Failure
from chronos.delivery.job import DeliveryJob
from chronos.kafka.errors import ErrorKind, classify, describe
from chronos.types import EpochMs

#: Errors that say nothing about one record: never a reason to defer it.
_SAYS_NOTHING = frozenset({ErrorKind.OUTAGE, ErrorKind.FENCED})
#: How long a topic Kafka refused counts as refused without asking again, ms.
_REFUSAL_HOLDS_MS = 1_000


def not_authorized(topic: str) -> KafkaError:
    """The error a record of ``topic`` failed with, as Kafka's authorizer told it."""
    return KafkaError(
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        f"Topic authorization failed: chronos may not write {topic} (from its authorized "
        "operations)",
    )


class Verdicts:
    """The policy's verdicts on a master's failed deliveries, kept across its transactions.

    Parameters:
        policy: when a delivery goes to the dead-letter topic, and when it is tried again.
        clock: time source.
        attempts: where failed attempts are kept for the status lookup (None: nowhere).
    """

    def __init__(
        self, policy: DeadLetterPolicy, clock: Clock, attempts: Attempts | None = None
    ) -> None:
        self.policy = policy
        self._clock = clock
        self._attempts = attempts
        #: Why a message (by key) goes to the dead-letter topic instead of its target.
        self.dead: dict[bytes, str] = {}
        #: Keys whose dead letter the dead-letter topic refused whole: send the shrunk form.
        self.shrink: set[bytes] = set()
        #: When a message's delivery first failed, and how often, by id (the policy gives up
        #: after a while; a deferred message changes its key, not its id).
        self._failed: dict[str, tuple[EpochMs, int]] = {}
        #: When each deferred message is tried again, by id: moved to that slot until then.
        self.retry_at: dict[str, EpochMs] = {}
        #: Jobs (by index) the policy judged while the open transaction was published.
        self.judged: set[int] = set()
        #: Target topics whose rights Kafka was asked about (``refused_now``).
        self._checked: set[str] = set()
        #: Target topics Kafka said chronos may not write, and when it said so: asked again
        #: before an attempt once ``_REFUSAL_HOLDS_MS`` passed.
        self._refused: dict[str, EpochMs] = {}

    def judge(self, n: int, job: DeliveryJob, error: KafkaError) -> str | None:
        """The policy's verdict on one more failure of ``job``'s delivery: the reason it goes
        to the dead-letter topic (kept for the redo), or None to try it again, later (deferred,
        when the error concerns its topic) or in the redo (an outage)."""
        self.judged.add(n)
        now = self._clock.now_ms()
        message = job.message
        ident = job.key.hex() if message is None else message.id
        first, attempts = self._failed.get(ident, (now, 0))
        attempts += 1
        self._failed[ident] = (first, attempts)
        topic = None if message is None else message.topic
        reason = self.policy.reason_after(error, Failure(topic, job.due_ms, first, attempts, now))
        retry_at: EpochMs | None = None
        if reason is not None:
            self.dead[job.key] = reason
        elif message is not None and classify(error) not in _SAYS_NOTHING:
            retry_at = now + self.policy.retry_delay_ms(topic, attempts)
            self.retry_at[message.id] = retry_at
        if self._attempts is not None and message is not None and (reason or retry_at):
            record = AttemptsRecord(attempts, describe(error), now, retry_at)
            self._attempts.failed(message.id, record)
        return reason

    def is_deferred(self, job: DeliveryJob) -> bool:
        message = job.message
        return message is not None and message.id in self.retry_at

    def judge_purged(self, jobs: list[DeliveryJob], purged: list[int]) -> bool:
        """Judge records Kafka purged from the transaction: those of a topic chronos may not
        write failed for that; True when none is (the purge says nothing: retry the range)."""
        topic_of: dict[int, str] = {}
        for n in purged:
            message = jobs[n].message
            if message is not None:
                topic_of[n] = message.topic
        refused = self.policy.unwritable(set(topic_of.values()))
        if not refused:
            return True
        self._refused.update(dict.fromkeys(refused, self._clock.now_ms()))
        for n, topic in topic_of.items():
            if topic in refused:
                self.judge(n, jobs[n], not_authorized(topic))
        return False

    def refused_now(self, jobs: list[DeliveryJob], upto: EpochMs) -> set[str]:
        """The target topics of this transaction's attempts that chronos may not write.

        Asked of Kafka for a topic not seen before and for one refused before, never inside
        the transaction: a record to a refused topic fails the transaction as a whole, and
        when it is the first of it, its abort ends the producer (Apache Kafka 4.1.1 answers
        ``INVALID_TXN_STATE``: a term's retake each time). So a refused topic costs a
        question per attempt, not an abort."""
        checked, refused, retrying = self._checked, self._refused, self.retry_at
        now = self._clock.now_ms()
        ask: set[str] = set()
        held: set[str] = set()
        for job in jobs:
            message = job.message
            if message is None or job.done:
                continue
            topic = message.topic
            if topic in checked and topic not in refused:
                continue
            retry_at = retrying.get(message.id) if retrying else None
            if retry_at is not None and retry_at > upto:
                continue  # deferred, not tried in this transaction
            asked = refused.get(topic)
            if asked is not None and now - asked < _REFUSAL_HOLDS_MS:
                held.add(topic)  # asked a moment ago: a question per transaction cost too much
            else:
                ask.add(topic)
        if not ask:
            return held
        answer = self.policy.unwritable(ask)
        if answer is None:
            return held  # Kafka did not answer: asked again at the next sight
        checked |= ask
        for topic in ask:
            if topic in answer:
                refused[topic] = now
            else:
                refused.pop(topic, None)
        return held | answer

    def settled(self, jobs: list[DeliveryJob], upto: EpochMs) -> list[str]:
        """A commit covered ``jobs``: forget the verdicts of those it tried (delivered or
        dead-lettered); a deferred one keeps its own until its attempt. The ids tried."""
        retrying = self.retry_at
        tried: list[str] = []
        for job in jobs:
            self.dead.pop(job.key, None)
            self.shrink.discard(job.key)
            message = job.message
            ident = job.key.hex() if message is None else message.id
            tried.append(ident)
            retry_at = retrying.get(ident) if retrying else None
            if retry_at is None or retry_at <= upto:  # tried in it: delivered or dead-lettered
                self._failed.pop(ident, None)
                retrying.pop(ident, None)
        return tried

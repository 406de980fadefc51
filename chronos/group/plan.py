"""The first step of a delivery transaction: what it does with each due message, as data.

A message is sent (to its target, or to the dead-letter topic when its reason is already
known), or moved to a later slot as a progress state: deferred to its next attempt, held back
by its topic's rate, or, for a repeat, followed by its next occurrence. Nothing here produces
a record; ``execute.py`` does, in the plan's order, and ``commit.py`` settles it.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field

from chronos.delivery.deadletter import NOT_YET, Before, TopicMissing
from chronos.delivery.job import DeliveryJob
from chronos.delivery.rate_plan import RatePlan
from chronos.group.verdicts import Verdicts, not_authorized
from chronos.model import DelayMessage
from chronos.schedule.progress_record import RepeatState
from chronos.store import codec, keys
from chronos.types import EpochMs


class TopicNotYet(Exception):
    """A target topic was unknown at a first look; the transaction waits for a second."""


@dataclass(frozen=True, slots=True)
class Send:
    """One message the transaction publishes.

    Parameters:
        n: its job's index in the batch (how failures and placements name it).
        job: the due message.
        known: the dead-letter reason already decided, or the policy's word before trying
            (None: to its target).
    """

    n: int
    job: DeliveryJob
    known: Before


@dataclass
class BatchPlan:
    """One transaction's decisions, in job order: the sends, then the progress states it
    publishes (deferred, paced, next occurrences)."""

    sends: list[Send] = field(default_factory=list)
    states: list[RepeatState] = field(default_factory=list)
    #: Messages moved before they are due by the rate's look-ahead, with the stored bytes
    #: they were read as: the master's store moves one only while it still holds those bytes
    #: (a cancel or a reschedule may have come since).
    ahead: dict[str, bytes] = field(default_factory=dict)


def plan_batch(
    jobs: list[DeliveryJob],
    upto: EpochMs,
    now: EpochMs,
    verdicts: Verdicts,
    rates: RatePlan | None,
    refused: set[str],
) -> BatchPlan:
    """Decide each job of the batch of slots up to ``upto``; ``refused``: target topics Kafka
    refuses now (their messages are judged before any attempt). Raises ``TopicNotYet`` at
    the first message whose topic is unknown at a first look (nothing after it is decided).
    """
    plan = BatchPlan()
    states = plan.states
    retrying = verdicts.retry_at
    for n, job in enumerate(jobs):
        if job.done:
            continue  # a repeat occurrence superseded before a crash
        message = job.message
        if message is not None and (retrying or refused):
            retry_at = retrying.get(message.id)
            if message.topic in refused and (retry_at is None or retry_at <= upto):
                verdicts.judge(n, job, not_authorized(message.topic))
                retry_at = retrying.get(message.id)
            if retry_at is not None and retry_at > upto:
                states.append(RepeatState(message.id, message, retry_at))  # deferred
                continue
        # Asked once per job: ``_missing_deferred`` and the send both need it.
        known = verdicts.dead.get(job.key) or verdicts.policy.reason_before(job)
        if message is not None and _missing_deferred(n, job, known, upto, states, verdicts):
            continue
        if rates is not None and message is not None and message.id not in retrying:
            slot = rates.slot_for(
                message.id, message.topic, keys.slot_of(job.key), job.due_ms, now, upto
            )
            if slot is not None:
                states.append(RepeatState(message.id, message, slot))  # over the rate
                continue
        # A reason ``_missing_deferred`` just judged (the last attempt) comes first.
        known = verdicts.dead.get(job.key) or known
        if known is NOT_YET:
            raise TopicNotYet(message.topic if message else "")
        if rates is not None and message is not None and known is None:
            # Counted as it goes: what the trailing second holds (``RatePlan.admit``).
            base = max(job.due_ms, keys.slot_of(job.key))
            slot = rates.admit(message.id, message.topic, base, now, upto)
            if slot is not None:
                states.append(RepeatState(message.id, message, slot))  # over the rate
                continue
        plan.sends.append(Send(n, job, known))
        if message is not None and message.repeat is not None:
            followup = job.followup
            slot_ms = 0 if followup is None else max(followup.due_ms, upto + 1)
            states.append(RepeatState(message.id, followup, slot_ms))
    return plan


#: A row read ahead of a transaction's range: its key, its stored bytes, the message.
AheadRow = tuple[bytes, bytes, DelayMessage]


def limited_rows(rows: list[tuple[bytes, bytes]], rates: RatePlan) -> list[AheadRow]:
    """The rows of rate-limited topics among ``rows``, decoded once (a transaction plans them
    again after a trial)."""
    found: list[AheadRow] = []
    for key, raw in rows:
        message = codec.decode(raw)
        if rates.limited(message.topic):
            found.append((key, raw, message))
    return found


def plan_ahead(
    rows: list[AheadRow], rates: RatePlan, plan: BatchPlan, skip: Container[str]
) -> None:
    """Plan ``rows`` (stored past the transaction's range, in key order) before they fall
    due: each one the rate moves becomes a progress state of ``plan``. ``skip``: ids moved
    otherwise in this transaction (a deferred retry, a reschedule)."""
    for key, raw, message in rows:
        if message.id in skip:
            continue
        slot = keys.slot_of(key)
        found = rates.ahead_for(message.id, message.topic, slot, message.due_ms)
        if found != slot:
            plan.states.append(RepeatState(message.id, message, found))
            plan.ahead[message.id] = raw


def _missing_deferred(
    n: int,
    job: DeliveryJob,
    known: Before,
    upto: EpochMs,
    states: list[RepeatState],
    verdicts: Verdicts,
) -> bool:
    """Whether ``job``'s topic is missing (``known``: what the policy says before trying)
    and its policy retries it later: then it moves to its next attempt's slot (added to
    ``states``). A missing topic's last attempt is dead-lettered by its send (``judge``
    noted the reason)."""
    if not isinstance(known, TopicMissing):
        return False
    message = job.message
    assert message is not None
    if verdicts.judge(n, job, known.error) is not None:
        return False
    retry_at = verdicts.retry_at.get(message.id)
    if retry_at is None or retry_at <= upto:
        return False
    states.append(RepeatState(message.id, message, retry_at))
    return True


def in_due_order(jobs: list[DeliveryJob], rates: RatePlan) -> None:
    """Put the jobs of rate-limited topics in due order, in their places among the others:
    messages planned into one slot are stored in id order, and would go out of due order."""
    places = [n for n, job in enumerate(jobs) if job.message and rates.limited(job.message.topic)]
    if len(places) < 2:
        return
    ordered = sorted((jobs[n] for n in places), key=_due)
    for n, job in zip(places, ordered, strict=True):
        jobs[n] = job


def _due(job: DeliveryJob) -> EpochMs:
    return job.due_ms

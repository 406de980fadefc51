"""The third step of a delivery transaction: judge why it cannot commit, or record what its
commit delivered.

An abort judges each failed record once (dead-letter or defer it in the redo, through the
policy's ``Verdicts``) and says whether the redo may follow at once: it may when every
failure was a record's own, not an outage. A commit's outcomes say where each delivery
landed (the status lookup) and how late each rate-limited topic runs.
"""

from __future__ import annotations

import structlog
from confluent_kafka import KafkaError

from chronos.delivery.deadletter import Refusal, when_dead_letter_refused
from chronos.delivery.job import DeliveryJob
from chronos.delivery.pacing import TOPIC_LATENESS
from chronos.delivery.rate_plan import RatePlan
from chronos.group.execute import PROGRESS, PURGED
from chronos.group.verdicts import Verdicts
from chronos.kafka.errors import ErrorKind, Fenced, NotAuthorized, classify, describe
from chronos.metrics import Metrics
from chronos.store import keys, outcome
from chronos.types import EpochMs

log = structlog.get_logger(__name__)


def judge_abort(
    jobs: list[DeliveryJob],
    failures: dict[int, KafkaError],
    left: int,
    verdicts: Verdicts,
    topics: tuple[str, str],
    term: int,
) -> bool:
    """Judge each failure of a transaction that must abort (``left``: records the flush
    left unanswered); True when the redo may follow at once (every failure was the record's
    own). Raises ``Fenced`` (the caller aborts quietly) and ``NotAuthorized``; ``topics``:
    the progress and the dead-letter topic, for those errors."""
    progress_topic, dead_letter_topic = topics
    outage = left > 0
    purged: list[int] = []
    for n, error in failures.items():
        kind = classify(error)
        if kind is ErrorKind.FENCED:
            raise Fenced(describe(error))
        if n == PROGRESS or not 0 <= n < len(jobs):
            if kind is ErrorKind.AUTHORIZATION:
                raise NotAuthorized(f"writing {progress_topic}", error)
            outage = True
            continue
        key = jobs[n].key
        if key in verdicts.dead:  # the dead letter itself was refused
            refusal = when_dead_letter_refused(error, key in verdicts.shrink)
            if refusal is Refusal.FATAL:
                raise NotAuthorized(f"writing {dead_letter_topic}", error)
            if refusal is Refusal.SHRINK:
                verdicts.shrink.add(key)
            else:
                outage = True
            continue
        if n in verdicts.judged:
            continue
        if error.code() in PURGED:
            purged.append(n)
        elif kind is ErrorKind.OUTAGE:
            outage = True
        else:
            verdicts.judge(n, jobs[n], error)
    if purged:
        outage = verdicts.judge_purged(jobs, purged) or outage
    first = next(iter(failures.values()), None)
    in_jobs = [n for n in failures if 0 <= n < len(jobs)]
    log.warning(
        "transaction_aborted",
        term=term,
        records=len(jobs),
        to_dead_letters=sum(jobs[n].key in verdicts.dead for n in in_jobs),
        deferred=sum(1 for n in in_jobs if verdicts.is_deferred(jobs[n])),
        unanswered=left,
        error=describe(first) if first is not None else "flush timed out",
    )
    return not outage


def outcomes(
    jobs: list[DeliveryJob],
    targets: list[int],
    placed: dict[int, tuple[int, int]],
    dead: dict[bytes, str],
    now: EpochMs,
) -> list[tuple[bytes, bytes]]:
    """Where the committed transaction's jobs went: target partition and offset, or the
    dead-letter reason."""
    found: list[tuple[bytes, bytes]] = []
    one_shots: list[outcome.BlockEntry] = []
    for n in targets:
        job = jobs[n]
        partition, offset = placed.get(n, (-1, -1))
        occurrence = job.message.occurrence if job.message is not None else job.occurrence
        if job.followup is None and occurrence == 1:
            one_shots.append((job.key, partition, offset))
            continue
        found.append(
            (job.key[keys.MS_WIDTH :], outcome.delivered(now, partition, offset, occurrence))
        )
    # Targets are in job order, which is key order: blocks (``store/outcome.py``).
    found += outcome.blocks(now, one_shots)
    for job in jobs:
        reason = dead.get(job.key)
        if reason is not None:
            occurrence = job.message.occurrence if job.message is not None else 1
            found.append((job.key[keys.MS_WIDTH :], outcome.dead_lettered(now, occurrence, reason)))
    return found


def observe_paced(
    metrics: Metrics, rates: RatePlan, jobs: list[DeliveryJob], targets: list[int], now: EpochMs
) -> None:
    """Each limited topic's lateness (``chronos_topic_lateness_seconds``), as a node
    alone's pacing shows it."""
    for n in targets:
        job = jobs[n]
        message = job.message
        if message is not None and rates.limited(message.topic):
            base = rates.lateness_base(message.id) or job.lateness_base_ms
            metrics.observe(f"{TOPIC_LATENESS}:{message.topic}", now - base)

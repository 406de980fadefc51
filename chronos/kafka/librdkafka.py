"""What every librdkafka client of chronos gets, whoever builds it: chronos' logger for
librdkafka's lines, an error handler that logs each distinct error at most every
:data:`ERROR_LOG_INTERVAL_S` and reports an authorization failure, and the check of whether a
topic exists. The factory (``clients.py``) and the publisher drivers (``publishers/``) both
build on it; it imports neither, so neither imports the other back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, Producer

from chronos.kafka.errors import ErrorKind, classify, describe
from chronos.logs import LIBRDKAFKA, Throttle, without_numbers
from chronos.types import KafkaConfig

#: librdkafka's own log lines go to this stdlib logger (configured in ``chronos.logs``).
LIBRDKAFKA_LOGGER = logging.getLogger(LIBRDKAFKA)
#: Seconds between two log lines of the same client error.
ERROR_LOG_INTERVAL_S = 10.0

log = structlog.get_logger(__name__)

#: Told why the process cannot go on (an authorization failure); see ``lifecycle.Fatal``.
OnFatal = Callable[[str], None]


class ClientErrors:
    """The ``error_cb`` of one client: librdkafka's client-level errors.

    librdkafka repeats an outage's error every few hundred ms, from every client: each
    distinct error is logged once per :data:`ERROR_LOG_INTERVAL_S`, with how often it came
    meanwhile, and clients that share ``error_log`` (those of one ``KafkaClients``: a process)
    share that count, so a broker's death is one line, not one per client. An authorization
    failure is reported to ``on_fatal`` (and logged critical); a fatal one to
    ``on_client_fatal`` (a publisher replaces its producer).

    Parameters:
        client: the client's name in logs.
        on_fatal: told when chronos' credentials are refused; None only logs.
        on_client_fatal: told of errors librdkafka marks fatal for this client.
        error_log: the throttle of the error lines; None: this client's own.
    """

    def __init__(
        self,
        client: str,
        on_fatal: OnFatal | None = None,
        on_client_fatal: Callable[[KafkaError], None] | None = None,
        error_log: Throttle | None = None,
    ) -> None:
        self._client = client
        self._on_fatal = on_fatal
        self._on_client_fatal = on_client_fatal
        self._error_log = error_log or Throttle(ERROR_LOG_INTERVAL_S)

    def __call__(self, error: KafkaError) -> None:
        kind = classify(error)
        if kind is ErrorKind.AUTHORIZATION:
            log.critical("kafka_not_authorized", client=self._client, error=describe(error))
            if self._on_fatal is not None:
                self._on_fatal(f"Kafka refused {self._client}: {describe(error)}")
            return
        if error.fatal():
            log.critical("kafka_client_fatal_error", client=self._client, error=str(error))
            if self._on_client_fatal is not None:
                self._on_client_fatal(error)
            return
        text = str(error)
        repeated = self._error_log.admit(without_numbers(text))
        if repeated is not None:
            log.warning("kafka_client_error", client=self._client, error=text, repeated=repeated)


class TransactionFailures:
    """The ``logger`` of one transactional producer: librdkafka's lines go on to chronos'
    logger, and the one that says the open transaction failed and needs an epoch bump
    (facility ``TXNERR``, :data:`EPOCH_BUMP`) is noted.

    librdkafka says so in that line only. A transaction that failed on skipped sequence
    numbers (after a broker restart: ``OUT_OF_ORDER_SEQUENCE_NUMBER``, "requires epoch bump")
    keeps the failed request's records queued, unsent and unanswered, until the abort purges
    them: a flush waits its whole timeout for them (10 s seen in a broker-kill run) unless
    its caller knows to stop. confluent-kafka serves the lines from ``poll`` and ``flush`` on
    the calling thread, so a flush in slices sees the note between two of them.
    """

    def __init__(self) -> None:
        #: The failed transaction's reason, until ``clear``; None while none failed.
        self.reason: str | None = None

    def log(self, level: int, msg: str, *args: Any) -> None:
        """What confluent-kafka calls: ``log(level, "%s [%s] %s", facility, client, text)``."""
        LIBRDKAFKA_LOGGER.log(level, msg, *args)
        if (
            len(args) == 3
            and args[0] == TRANSACTION_FAILED
            and level >= logging.ERROR
            and EPOCH_BUMP in str(args[2])
        ):
            self.reason = str(args[2])

    def clear(self) -> None:
        """A new transaction begins: what failed the last one is over."""
        self.reason = None


#: librdkafka's facility for "Current transaction failed in state ...: ... (abortable)".
TRANSACTION_FAILED = "TXNERR"
#: What that line says when librdkafka keeps the failed request's records queued until the
#: abort (``rd_kafka_txn_set_abortable_error0``; other abortable failures purge them, and
#: their answers end the flush by themselves: a refused record is judged as its own).
EPOCH_BUMP = "requires epoch bump"


def lists_topic(metadata: Any, topic: str) -> bool:
    """Whether cluster metadata (any client's ``list_topics``) has ``topic`` with partitions
    and no error: how chronos decides a topic exists."""
    meta = metadata.topics.get(topic)
    return meta is not None and meta.error is None and bool(meta.partitions)


def routed(
    config: KafkaConfig, errors: ClientErrors, logger: object = LIBRDKAFKA_LOGGER
) -> dict[str, Any]:
    """``config`` with chronos' logger (or ``logger``, which passes the lines on to it) and
    error callback: what every client is built from (also in a decoder child, which receives
    the plain config)."""
    return {**config, "logger": logger, "error_cb": errors}


def consumer(config: KafkaConfig, errors: ClientErrors) -> Consumer:
    """A consumer of ``config`` (a decoder child receives a plain config) with log routing and
    error handling."""
    return Consumer(routed(config, errors))


def producer(
    config: KafkaConfig, errors: ClientErrors, logger: object = LIBRDKAFKA_LOGGER
) -> Producer:
    """A raw producer of ``config`` for the publisher drivers (``logger``: see ``routed``)."""
    return Producer(routed(config, errors, logger))

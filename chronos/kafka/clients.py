"""Every Kafka client chronos makes is built here: one place for log routing, client ids and
error handling.

Why one place: clients built ad hoc (a raw ``Consumer(config)``) printed librdkafka's lines past
chronos' logger, repeated an outage's error every few hundred ms, and met an authorization error
with retries for ever. Here each client gets what ``librdkafka.py`` gives every client (chronos'
logger for librdkafka's lines, an ``error_cb`` that logs each distinct error at most every
``ERROR_LOG_INTERVAL_S`` and reports an authorization failure to ``on_fatal``), and the
``client.id`` of its owner. The configs come from ``KafkaSettings``, which refuses passthrough
options that would change what chronos relies on (``settings.PROTECTED_KAFKA_KEYS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from chronos.kafka.librdkafka import ERROR_LOG_INTERVAL_S, ClientErrors, OnFatal, consumer, routed
from chronos.kafka.publishers.idempotent import IdempotentPublisher
from chronos.kafka.publishers.transactional import TransactionalProducer
from chronos.logs import Throttle
from chronos.types import KafkaConfig

if TYPE_CHECKING:
    from chronos.settings import KafkaSettings, KafkaValue

#: A consumer that joins a group to learn who is in it (the election, cluster membership),
#: not to read: partitions move as few as a rebalance allows, and it commits nothing and
#: starts at the end.
MEMBERSHIP_CONSUMER: KafkaConfig = {
    "partition.assignment.strategy": "cooperative-sticky",
    "enable.auto.commit": False,
    "auto.offset.reset": "latest",
}


#: Longest wait of ``KafkaClients.admin`` for a new client's first answer: a broker answers
#: DescribeCluster in 3-4 ms here; while it is away, every new admin client stalls its
#: caller this long (a member's claim round, a new owner's cancel gate), so no longer.
ADMIN_METADATA_WAIT_S = 0.5

#: How long a ``waiting_consumer``'s fetch may be held by the broker (librdkafka's default).
LONG_POLL_MS = 500


def lingering_fetch(linger_ms: int) -> KafkaConfig:
    """Consumer settings under which, once a fetch returned records, the partitions are not
    fetched again until ``linger_ms`` later while records wait in the consumer's queue
    (nothing for 0).

    Why: a fetch the broker holds is answered as soon as any partition it names has a record,
    and librdkafka sends no incremental fetch sessions, so every fetch and its answer name
    every partition read. Under load over many partitions that is hundreds of fetches a
    second, each paid per partition by the broker: reading 16 partitions at 2,000 records/s
    cost the broker about 120 µs more per record than reading one (docs/design/cluster-v2.md).
    Here ``queued.min.messages`` 1 makes librdkafka back a partition off for
    ``fetch.queue.backoff.ms`` whenever it finds anything in the queue (the consumer's, shared
    by its partitions, logs and errors included; librdkafka's ``rd_kafka_toppar_fetch_decide``)
    and look again then, so a fetch carries up to ``linger_ms`` of records and, once the queue
    is drained, goes 0 to ``linger_ms`` later. At rest nothing is queued and a fetch is
    answered at the first record, as before; under load a record waits up to about
    ``linger_ms`` more for its fetch. A backlog is read at a fetch per ``linger_ms`` and
    queue drained: a restore keeps librdkafka's defaults."""
    if linger_ms <= 0:
        return {}
    return {"queued.min.messages": 1, "fetch.queue.backoff.ms": linger_ms}


class KafkaClients:
    """Builds the clients of one process (a node, the proxy, a CLI command, a pipeline task).

    Parameters:
        settings: how to reach Kafka, and the passthrough options.
        client_id: ``client.id`` of every client (a node's id; how ``chronos group`` names a
            replica).
        max_message_bytes: the largest request (``limits.max_message_bytes``): producers take
            it with room for chronos' headers.
        on_fatal: told when Kafka refuses chronos' credentials (the node ends); None only logs.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        client_id: str,
        max_message_bytes: int | None = None,
        on_fatal: OnFatal | None = None,
    ) -> None:
        self._settings = settings
        self.client_id = client_id
        self._max_message_bytes = max_message_bytes
        self.on_fatal = on_fatal
        #: One count of each client error for every client built here (one line per error).
        self._error_log = Throttle(ERROR_LOG_INTERVAL_S)

    def producer_config(self, **overrides: KafkaValue) -> KafkaConfig:
        """A durable producer's config (see ``KafkaSettings.producer``)."""
        return self._settings.producer(
            self._max_message_bytes, **{"client.id": self.client_id, **overrides}
        )

    def consumer_config(self, group_id: str, **overrides: KafkaValue) -> KafkaConfig:
        """A consumer's config (see ``KafkaSettings.consumer``)."""
        return self._settings.consumer(group_id, **{"client.id": self.client_id, **overrides})

    def errors(self, client: str) -> ClientErrors:
        """An error handler for ``client`` that reports authorization failures to ``on_fatal``:
        a component passes its consumer's poll errors to it too."""
        return ClientErrors(client, self.on_fatal, error_log=self._error_log)

    def consumer(
        self,
        group_id: str,
        errors: ClientErrors,
        overrides: Mapping[str, KafkaValue] | None = None,
    ) -> Consumer:
        """A consumer in ``group_id`` (joined only by ``subscribe``; ``assign`` does not)."""
        return consumer(self.consumer_config(group_id, **(overrides or {})), errors)

    def waiting_consumer(
        self,
        group_id: str,
        errors: ClientErrors,
        overrides: Mapping[str, KafkaValue] | None = None,
    ) -> Consumer:
        """A consumer that mostly waits for rare records (a cluster member's progress logs,
        heartbeats, readiness board, membership and ingest): its fetches may be held up to
        ``LONG_POLL_MS``, as librdkafka's default holds them.

        Why: a fetch held by the broker is answered as soon as a record arrives (Kafka's
        fetch purgatory), so the hold costs a record no latency on Apache Kafka (a partition
        newly assigned waits up to the hold for the fetch in flight); what a short hold
        costs is an empty fetch every 50 ms per consumer, each naming every partition it
        reads (librdkafka sends no incremental fetch sessions). A member at rest over 64
        inner partitions read that as work that followed its partitions (measured in
        docs/design/cluster-v2.md). ``kafka.consumer_config`` still overrides it."""
        return consumer(
            self.consumer_config(
                group_id, **{"fetch.wait.max.ms": LONG_POLL_MS, **(overrides or {})}
            ),
            errors,
        )

    def admin(self) -> AdminClient:
        """An admin client that a broker answered, or one that waited
        ``ADMIN_METADATA_WAIT_S`` for it (a broker away: its questions then wait and fail as
        they did).

        Why: librdkafka's (2.16) first ListOffsets on a new client, made while another
        client of the process was being destroyed, waited 1 or 3 s (5 of 30 such clients,
        ``scripts/cold_admin_check.py``): asked before the client's connection was up, it is
        asked again a second or three later. A cluster member's first claim round after its
        return read its logs' ends 3.05 s late (a 3.5 s gap in the leave check), and a new
        owner's cancel gate asks a fresh client too. A question first that waits for the
        broker (DescribeCluster, 3-4 ms) leaves none waiting (0 of 30)."""
        config = {**self._settings.admin(), "client.id": self.client_id}
        client = AdminClient(routed(config, self.errors("admin")))
        try:
            # DescribeCluster: the lightest question that waits for a broker's answer (a
            # whole-cluster metadata request cost 50 ms on a broker of many topics).
            client.describe_cluster(request_timeout=ADMIN_METADATA_WAIT_S).result(
                ADMIN_METADATA_WAIT_S
            )
        except (KafkaException, TimeoutError):
            pass  # the broker is away: the client asks again when it is asked
        return client

    def idempotent(
        self,
        name: str,
        overrides: Mapping[str, KafkaValue] | None = None,
        stop_flush_s: float = 30.0,
    ) -> IdempotentPublisher:
        """An idempotent publisher with its own poll thread (not started), its producer
        configured with ``overrides``; ``stop`` waits up to ``stop_flush_s`` for what is in
        flight."""
        config = self.producer_config(**(overrides or {}))
        return IdempotentPublisher(config, name, self.on_fatal, self._error_log, stop_flush_s)

    def transactional(
        self, transactional_id: str, timeout_ms: int, name: str = "transactions"
    ) -> TransactionalProducer:
        """A transactional publisher with ``transactional_id`` (``init`` not called yet).

        Its records wait at most ``timeout_ms`` (the transaction timeout) for an answer: a
        transaction cannot outlive that anyway."""
        options: dict[str, KafkaValue] = {
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
            "message.timeout.ms": timeout_ms,
            "linger.ms": 5,
        }
        config = self.producer_config(**options)
        return TransactionalProducer(
            config, name, timeout_ms / 1000.0, self.on_fatal, self._error_log
        )

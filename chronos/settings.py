"""The one settings tree: TOML file + ``CHRONOS_…`` environment overrides, built at entry."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from chronos.errors import ConfigError
from chronos.names import TopicNames
from chronos.types import KafkaConfig

KafkaValue = str | int | float | bool
#: Longest wait before a client reconnects to a broker (librdkafka's default: 10 s).
_RECONNECT_BACKOFF_MAX_MS = 1000
_RECORD_OVERHEAD_BYTES = 64 * 1024

#: librdkafka options chronos sets itself, per client, and relies on: no passthrough table
#: (``kafka.client_config``, ``producer_config``, ``consumer_config``) may name one. Each with
#: what chronos relies on it for.
PROTECTED_KAFKA_KEYS: dict[str, str] = {
    "group.id": "each consumer's group is chronos' (ingest, election, progress reader)",
    "group.instance.id": "static membership would keep a dead master's role for a session",
    "client.id": "a replica is named by its client.id (node.node_id) in chronos group",
    "isolation.level": "the progress reader and ingest read committed records only",
    "enable.auto.commit": "ingest's offsets live in its store; the group's are advisory",
    "enable.auto.offset.store": "ingest offers the group only offsets its store fsynced",
    "auto.offset.reset": "a store that fell behind retention must be rebuilt, not skip records",
    "enable.partition.eof": "a takeover knows it read the progress topic to its end by it",
    "partition.assignment.strategy": "the election relies on cooperative-sticky",
    "session.timeout.ms": "set group.session_timeout_ms instead",
    "heartbeat.interval.ms": "set group.heartbeat_interval_ms instead",
    "transactional.id": "one per replica group, set by chronos",
    "transaction.timeout.ms": "set group.transaction_timeout_ms instead",
    "message.timeout.ms": "set delivery.message_timeout_ms (the proxy's is proxy.ack_timeout_s)",
    "delivery.timeout.ms": "set delivery.message_timeout_ms (the proxy's is proxy.ack_timeout_s)",
}
#: Options chronos sets to one value for every producer: spelling out that value is allowed.
_FIXED_PRODUCER_KEYS: dict[str, tuple[frozenset[str], str]] = {
    "acks": (
        frozenset({"all", "-1"}),
        "would answer requests before every in-sync replica has them; chronos produces with "
        "acks=all",
    ),
    "request.required.acks": (
        frozenset({"all", "-1"}),
        "would answer requests before every in-sync replica has them; chronos produces with "
        "acks=all",
    ),
    "enable.idempotence": (
        frozenset({"true"}),
        "lets a retried produce write a record twice or out of order; chronos' producers are "
        "idempotent",
    ),
}


class _Section(BaseModel):
    """Base of every section: unknown keys are errors, never silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: Words in a librdkafka option's name that make its value a secret, and options that are
#: secret whatever their name says (a private key; a config string that may hold a secret).
_SECRET_WORDS = ("password", "secret")
_SECRET_KEYS = frozenset({"ssl.key.pem", "sasl.oauthbearer.config"})


def _is_secret_key(key: str) -> bool:
    """Whether a librdkafka option carries a secret."""
    lowered = key.lower()
    return lowered in _SECRET_KEYS or any(word in lowered for word in _SECRET_WORDS)


class KafkaSettings(_Section):
    """How to reach Kafka; the ``*_config`` tables pass librdkafka options through verbatim."""

    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers.")
    sasl_password: SecretStr | None = Field(
        None, description="SASL password, kept out of logs; sets librdkafka 'sasl.password'."
    )
    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="librdkafka options whose values are secret (ssl.key.password, "
        "ssl.key.pem, sasl.oauthbearer.client.secret, ...), for every client, kept out of logs "
        "and reprs; the *_config tables refuse them.",
    )
    client_config: dict[str, KafkaValue] = Field(
        default_factory=dict,
        description=(
            "librdkafka options for every client (security, ...). Options chronos sets itself "
            "(group.id, isolation.level, transactional.id, ...) are refused: see "
            "PROTECTED_KAFKA_KEYS."
        ),
    )
    producer_config: dict[str, KafkaValue] = Field(
        default_factory=dict, description="librdkafka options for producers only."
    )
    consumer_config: dict[str, KafkaValue] = Field(
        default_factory=dict, description="librdkafka options for consumers only."
    )

    @field_validator("client_config", "producer_config", "consumer_config")
    @classmethod
    def _keep_protected(cls, config: dict[str, KafkaValue]) -> dict[str, KafkaValue]:
        """Refuse options chronos relies on (``PROTECTED_KAFKA_KEYS``): set there, they would
        silently win over chronos' own, e.g. ``isolation.level`` over the progress reader's
        ``read_committed``, or ``group.id`` over the election's group."""
        for key, value in config.items():
            if _is_secret_key(key):
                raise ValueError(
                    f"{key} is a secret: set it in kafka.secrets (or kafka.sasl_password), "
                    "where it is kept out of logs"
                )
            fixed = _FIXED_PRODUCER_KEYS.get(key)
            if fixed is not None:
                allowed, why = fixed
                if str(value).strip().lower() not in allowed:
                    raise ValueError(f"{key}={value!r} {why} (remove the option)")
            elif key in PROTECTED_KAFKA_KEYS:
                raise ValueError(
                    f"{key} is chronos' to set: {PROTECTED_KAFKA_KEYS[key]} (remove the option)"
                )
        return config

    def _common(self) -> KafkaConfig:
        config: KafkaConfig = {
            "bootstrap.servers": self.bootstrap_servers,
            # librdkafka doubles the wait before reconnecting up to 10 s by default (+50 %
            # jitter): after a broker restart each client came back 0-15 s after the broker,
            # and a master waited on its idle progress reader for up to 8 s (measured, broker
            # kill -9 under load). 1 s brings every client back within 1.5 s. 0.5 s was tried once:
            # that broker took over 120 s to restart (its controller stalled 37 s) under the
            # reconnects of 3 nodes' hundred clients; not proven their doing, not risked.
            "reconnect.backoff.max.ms": _RECONNECT_BACKOFF_MAX_MS,
        }
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password.get_secret_value()
        config.update({key: value.get_secret_value() for key, value in self.secrets.items()})
        config.update(self.client_config)
        return config

    def admin(self) -> KafkaConfig:
        """Config for an AdminClient."""
        return self._common()

    def producer(
        self, max_message_bytes: int | None = None, **overrides: KafkaValue
    ) -> KafkaConfig:
        """Config for a durable producer: idempotent, acks=all, Java-compatible partitioning."""
        config = self._common()
        config.update(
            {
                "enable.idempotence": True,
                "acks": "all",
                # murmur2 is what the Java client uses, so add and cancel of one id land on the
                # same inner partition whichever language produced them.
                "partitioner": "murmur2_random",
                "linger.ms": 2,
            }
        )
        if max_message_bytes is not None:
            # Room for chronos' own headers and the record framing around the user's bytes.
            config["message.max.bytes"] = max_message_bytes + _RECORD_OVERHEAD_BYTES
        config.update(overrides)
        config.update(self.producer_config)
        return config

    def consumer(self, group_id: str, **overrides: KafkaValue) -> KafkaConfig:
        """Config for an inner-topic consumer that stores offsets only when told to."""
        config = self._common()
        config.update(
            {
                "group.id": group_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": True,
                "enable.auto.offset.store": False,
                "auto.commit.interval.ms": 1000,
                "isolation.level": "read_committed",
                # Bounds how long a broker may hold a fetch; ingest latency of a
                # deliver-now message depends on it.
                "fetch.wait.max.ms": 50,
            }
        )
        config.update(overrides)
        config.update(self.consumer_config)
        return config


class TopicSettings(_Section):
    """Internal topic names and how to create them."""

    namespace: str = Field("chronos", description="Prefix of every internal topic and group.")
    inner_partitions: int = Field(
        1,
        ge=1,
        description=(
            "Partitions of the inner topic, when chronos creates it. A node reads all of them "
            "(unless nodes split them, node.owned_partitions), with node.ingest_threads threads "
            "(1: a second only contends for the GIL), so within a node more buy no "
            "parallelism, only smaller Kafka batches: at 25,000 msg/s the broker "
            "used 65-68 % of a core with 8 and 32-34 % with 1, and p99 lateness was 2,362-2,590 "
            "ms against 14-20 ms. Existing topics keep theirs: a node reads the count from "
            "Kafka."
        ),
    )
    replication_factor: int = Field(1, ge=1, description="Replication of internal topics.")
    create: bool = Field(True, description="Create the internal topics at start when missing.")

    @property
    def names(self) -> TopicNames:
        """The derived topic and group names."""
        return TopicNames(self.namespace)


class LimitSettings(_Section):
    """Validation rules shared by the proxy, the node's ingest and the pipeline."""

    max_delay_s: int = Field(365 * 86400, ge=1, description="Furthest due time ahead, seconds.")
    max_message_bytes: int = Field(
        1_000_000,
        ge=1,
        description=(
            "Largest key + value + headers of one request, bytes. Delivery adds chronos' "
            "headers and Kafka's framing (up to ~400 bytes with a 128-byte id), and the target "
            "topic must take the whole record: Apache Kafka's default max.message.bytes "
            "(1,048,588) leaves room for them at this default, not at 1 MiB. Raise it only "
            "with the target topics' limits; a record they refuse is dead-lettered."
        ),
    )
    max_id_bytes: int = Field(128, ge=8, le=1024, description="Longest caller-given message id.")
    repeat_max_times: int = Field(10_000, ge=1, description="Most occurrences of a repeat.")
    repeat_min_interval_ms: int = Field(1000, ge=1, description="Shortest repeat interval, ms.")
    repeat_max_interval_ms: int = Field(
        86_400_000, ge=1, description="Longest repeat interval and exponential cap, ms."
    )


class StoreSettings(_Section):
    """RocksDB tuning."""

    compression: Literal["lz4", "zstd", "snappy", "none"] = Field(
        "lz4", description="Block compression of the message column family."
    )
    block_cache_mb: int = Field(64, ge=1, description="Shared block cache, MiB.")
    write_buffer_mb: int = Field(
        32, ge=1, description="Memtable size per column family, MiB; all share twice this."
    )
    max_background_jobs: int = Field(2, ge=1, description="RocksDB flush/compaction threads.")
    l0_compaction_trigger: int = Field(
        8,
        ge=2,
        le=64,
        description=(
            "Level-0 files that start a compaction (writes slow down at max(20, 4x) files and "
            "stop 16 later). Messages are written at random keys, so each L0 compaction "
            "rewrites the files below it: 8 kept the store alone at 94-95 % of its first rate "
            "over 100 M adds (4: 65 %). Steady state at 20,000 msg/s: p99 lateness 43-69 ms "
            "at 8, 55-71 ms at 4 (two runs each)."
        ),
    )
    compaction_nice: int = Field(
        19,
        ge=0,
        le=19,
        description=(
            "CPU niceness of RocksDB's compaction threads (Linux; 0 leaves them alone). A "
            "compaction competing with the push and sender threads for the cores made delivery "
            "seconds late: at 20,000 msg/s p99 lateness 761-785 ms at 0, 115-129 ms at 19. "
            "Flush threads keep their priority: a late flush stalls writes."
        ),
    )
    min_free_mb: int = Field(
        256,
        ge=0,
        description=(
            "Disk reserve, MiB: below this much free space on the store's file system chronos "
            "stops writing (ingest holds its batch, delivery pauses after "
            "node.max_unpersisted_s) and goes on within ~20 ms of space coming back. A write "
            "that meets a full disk instead puts RocksDB in an error state it leaves only by "
            "its own poll, every 5 s. 0: no reserve."
        ),
    )
    wal_sync_interval_ms: int = Field(
        100,
        ge=0,
        description=(
            "fsync the WAL at most this often, ms (0: after every ingest batch). A killed "
            "process loses nothing either way; after a power loss ingest re-reads from Kafka "
            "what the last interval wrote."
        ),
    )


#: Where a node decodes its inner records (see ``NodeSettings.ingest_decoder``).
DecoderPlace = Literal["process", "thread"]


class NodeSettings(_Section):
    """One broker node: identity, storage location and thread counts."""

    node_id: str = Field("node-1", pattern=r"^[A-Za-z0-9._-]{1,64}$", description="Node name.")
    data_dir: Path = Field(Path("data/node-1"), description="Directory of the RocksDB store.")
    checkpoint_dir: Path | None = Field(
        None,
        description="The only directory `chronos checkpoint` may ask a running node to write "
        "a checkpoint into (the request is a file anyone who can write data_dir could drop); "
        "unset: the directory that holds data_dir.",
    )
    ingest_threads: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Inner-topic ingest threads (each with its own reader, see ingest_decoder). With "
            "decoding in the threads, a second one added contention, not throughput (p99 "
            "lateness 55-62 -> 163-1022 ms at 12,000 msg/s); with decoder processes it was not "
            "measured. More threads than inner partitions are not started."
        ),
    )
    owned_partitions: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list,
        description=(
            "Inner partitions this node ingests and delivers; empty: all of them. Nodes that "
            "split the partitions between them (each with its own node_id and data_dir) each "
            "run their own store and GIL; add and cancel of one id share a partition, so each "
            "request reaches one of them. A store keeps the partitions it was filled from (a "
            "node refuses to start with one holding others). For machines with cores to spare: "
            "on 2 cores shared with the broker and the load tools, two nodes at 37,500 msg/s "
            "held 1 run of 4 (p99 74-197 ms) where one node held 2 of 2 "
            "(scripts/multi_node_steady.py, docs/benchmarks round 8)."
        ),
    )
    ingest_decoder: DecoderPlace = Field(
        "process",
        description=(
            "Where inner records are consumed, decoded, validated and encoded: in a child "
            "process per ingest thread (process) or in the ingest thread (thread). That work "
            "was ~45 % of ingest's GIL time; in a child it runs beside the node's threads, "
            "which only unpickle its batches and write them. At 35,000 msg/s p99 lateness "
            "was 84 and 640 ms with process against 2,836 and 3,447 ms with thread "
            "(alternated 60 s runs, 2 cores shared with the broker and the load tools). It "
            "costs a second process: with 10 M pending the node and its child peaked at 370 "
            "MiB of RSS (337 with thread) and restarted in 0.74 s (0.44 s)."
        ),
    )
    ingest_batch_max: int = Field(
        1000,
        ge=1,
        description=(
            "Most records per store write batch. Batches fill up only when ingest is behind, "
            "and each batch releases and takes back the GIL several times (poll, consume, index "
            "multi-get), so bigger batches catch up faster: at 32,500 msg/s (inner topic of 1 "
            "partition, decoding in the thread) p99 lateness was 28-51 ms with 1000 against "
            "98-1,452 ms with 200 (200-byte payloads); 35,000 was past the edge there (67 ms "
            "in one run, 1,537 in the full benchmark, 1,918 with 2000). A write holds "
            "the GIL (rocksdict) for ~2.5 us per 200-byte record, longer for bigger ones: with "
            "large payloads a smaller batch keeps those pauses short."
        ),
    )
    ingest_poll_timeout_ms: int = Field(100, ge=1, description="Consumer poll timeout, ms.")
    sender_threads: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Threads producing to targets. produce() never blocks, so one is enough; a second "
            "only contends for the GIL (burst: 52,000 vs 47,000 msg/s)."
        ),
    )
    queue_batches: int = Field(64, ge=1, description="Bound of the push->sender queue, batches.")
    push_batch_max: int = Field(500, ge=1, description="Most messages per queued batch.")
    max_in_flight: int = Field(
        200_000, ge=1, description="Most dispatched, not yet collected deliveries (memory bound)."
    )
    progress_interval_ms: int = Field(
        20, ge=1, description="How often acknowledged deliveries advance the seek timestamp."
    )
    shutdown_timeout_s: float = Field(30.0, gt=0, description="Drain time on SIGTERM.")
    max_unpersisted_s: float = Field(
        5.0,
        gt=0,
        description=(
            "Pause delivery once the progress (seek timestamp) could not be written for this "
            "long, e.g. on a full disk: what is delivered meanwhile would all be delivered "
            "again after a restart. Delivery resumes when a write succeeds."
        ),
    )
    cancel_margin_ms: int = Field(
        250,
        ge=0,
        description=(
            "A cancel Kafka acknowledged at least this long before its message's due time (by "
            "the node's clock) is never delivered: delivery of a slot waits until ingest has "
            "taken care of every inner record acknowledged up to this long before it. Ingest "
            "lag beyond it makes deliveries late (metric cancel_gate_held_ms), never wrong: "
            "100 cost a cold node 3-10x its p99 under load, where 250 cost nothing measurable "
            "(docs/benchmarking.md). Clients' and the broker's clocks must agree with "
            "the node's within it."
        ),
    )
    watermark_interval_ms: int = Field(
        50,
        ge=1,
        description=(
            "Least time between two questions to Kafka of where the inner partitions end (one "
            "ListOffsets) for the cancel gate while delivery waits for it and no record read "
            "moved it (a quiet partition, or an inner topic without LogAppendTime). Asked a "
            "margin before the next message due, and once a second while nothing is due. "
            "Below cancel_margin_ms."
        ),
    )
    catch_up_timeout_s: float = Field(
        60.0,
        ge=0,
        description="At start, deliver only after ingest reached the inner topic's "
        "end offsets, or after this many seconds.",
    )


#: A Kafka topic name (as ``validation.TOPIC_CHARS``, which imports these settings).
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def check_policy_topic(topic: str) -> str:
    """``topic`` when it may have a policy (a topic name, or ``"*"``); ``ValueError`` else."""
    if topic != ANY_TOPIC and not TOPIC_NAME.fullmatch(topic):
        raise ValueError(f"{topic!r} is not a Kafka topic name (or '*')")
    return topic


#: The name under ``delivery.topics`` whose policy covers every topic without one of its own.
ANY_TOPIC = "*"
#: Bounds of a policy's numbers: a slot computed from them stays a millisecond timestamp (a
#: rate of 1e-300 or a backoff of 1e30 ms would not), and every bound is said in the error.
MIN_RATE = 0.001
MAX_RATE = 1_000_000
MAX_BACKOFF_MS = 86_400_000
MAX_POLICY_AGE_S = 10 * 365 * 86_400


class TopicPolicy(_Section):
    """How fast deliveries to one target topic go out, and how they are retried before they go
    to the dead-letter topic (``delivery.topics.<name>``, ``"*"`` for every topic without its
    own).

    With a policy, a refusal that concerns the topic (chronos may not write it, a storage
    error of its partition, the topic does not exist) is retried with this backoff until
    ``max_attempts`` or ``max_age_s`` run out, then dead-lettered with the reason. A record
    that can never be delivered as it is (too large, invalid) is dead-lettered at once, and an
    outage (Kafka unreachable) is retried for as long as it lasts, as without one."""

    max_attempts: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Dead-letter after this many failed attempts (unset: no limit).",
    )
    max_age_s: float | None = Field(
        None,
        gt=0,
        le=MAX_POLICY_AGE_S,
        description=(
            "Dead-letter a delivery that fails once it is this far past its due time "
            "(unset: delivery.give_up_after_s after its first attempt)."
        ),
    )
    backoff_initial_ms: int = Field(
        100, ge=1, le=MAX_BACKOFF_MS, description="First retry delay, ms."
    )
    backoff_max_ms: int = Field(
        10_000, ge=1, le=MAX_BACKOFF_MS, description="Longest retry delay, ms."
    )
    rate: float | None = Field(
        None,
        ge=MIN_RATE,
        le=MAX_RATE,
        description=(
            "Most messages a second delivered to the topic; what falls due faster waits (a "
            "group's master moves it to a later slot), in due order, and shows in "
            "topic_lateness (unset: no limit). In a cluster, or on nodes that own some of "
            "the inner partitions, each partition's owner paces its share (rate and burst "
            "times the partitions it delivers over all of them; a burst of one at least): "
            "the rate holds for the whole when the topic's ids spread over the partitions."
        ),
    )
    burst: int | None = Field(
        None,
        ge=1,
        le=MAX_RATE,
        description="Messages the rate lets out at once after a quiet spell (unset: rate / 10).",
    )

    @property
    def retries(self) -> bool:
        """Whether the policy says how to retry (a field of it set): a policy of a rate alone
        leaves the retries as without one."""
        return bool(self.model_fields_set & _RETRY_FIELDS)

    @property
    def burst_size(self) -> int:
        """``burst``, or a tenth of a second's worth: at least what a sender lets out between
        two looks at the clock, or the rate would not be reached."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil((self.rate or 0) / 10))

    @model_validator(mode="after")
    def _backoff_ordered(self) -> TopicPolicy:
        if self.backoff_max_ms < self.backoff_initial_ms:
            raise ValueError("backoff_max_ms must not be below backoff_initial_ms")
        return self

    def backoff_ms(self, attempts: int) -> int:
        """The wait after the ``attempts``-th failed attempt: doubling, capped."""
        return backoff_ms(self.backoff_initial_ms, self.backoff_max_ms, attempts)


#: The fields of a policy that say how to retry.
_RETRY_FIELDS = frozenset({"max_attempts", "max_age_s", "backoff_initial_ms", "backoff_max_ms"})


def backoff_ms(initial_ms: int, max_ms: int, attempts: int) -> int:
    """``initial_ms`` doubled per failed attempt after the first, at most ``max_ms``."""
    doubled: int = initial_ms << min(max(attempts - 1, 0), 20)
    return min(doubled, max_ms)


class DeliverySettings(_Section):
    """Producing to target topics: retries and dead-lettering."""

    retry_backoff_initial_ms: int = Field(100, ge=1, description="First retry delay, ms.")
    retry_backoff_max_ms: int = Field(10_000, ge=1, description="Longest retry delay, ms.")
    give_up_after_s: float = Field(
        3600.0, gt=0, description="Dead-letter a message still failing after this long."
    )
    message_timeout_ms: int = Field(
        30_000, ge=1000, description="librdkafka delivery timeout of one attempt, ms."
    )
    catch_up_window_s: float = Field(
        600.0,
        ge=0,
        description=(
            "A repeat with catch-up 'all' (the default) delivers each occurrence that fell due "
            "while nothing delivered it (a failover, an outage, a stop), once, oldest first, "
            "when it is overdue by at most this long; older ones collapse into one delivery "
            "(chronos-skipped says how many). Repeats with catch-up 'latest' always collapse."
        ),
    )
    scan_gap_ms: int = Field(
        2,
        ge=0,
        le=50,
        description=(
            "Node alone: while messages keep falling due, the least time between two scans "
            "of the schedule, ms (0: every slot as it falls due); a message due after a quiet "
            "spell still goes out at its slot. Each scan wakes the push worker, a sender and "
            "the acknowledgements: 2 ms against 0 cost the node 78-84 against 86 us of CPU per "
            "message at 5,000 msg/s (p99 3 against 2 ms) and 34.5-34.9 against 34.9-35.8 at "
            "30,000 (docs/benchmarks, issue 27)."
        ),
    )

    topics: dict[str, TopicPolicy] = Field(
        default_factory=dict,
        description=(
            'Retry policy per target topic ("*": every topic without its own): attempts, '
            "backoff and maximum age before the dead-letter topic. A topic without one keeps "
            "the defaults above: not authorized is dead-lettered at once, other refusals after "
            "give_up_after_s."
        ),
    )

    @field_validator("topics")
    @classmethod
    def _topic_names(cls, topics: dict[str, TopicPolicy]) -> dict[str, TopicPolicy]:
        for name in topics:
            check_policy_topic(name)
        return topics


#: How many progress intervals a backup watches the progress topic stand still before it
#: suspects the master (``group.suspect_after_ms``).
SUSPECT_PER_PROGRESS = 3


class GroupSettings(_Section):
    """Master/backup replication (docs/replica-groups.md). Without a name a node is alone."""

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description=(
            "Replica group of this node. Nodes naming the same group own the same inner "
            "partitions (node.owned_partitions) and each ingests into its own store; one of "
            "them, elected through Kafka, delivers in fenced transactions. Unset: a node alone "
            "that delivers at least once (chronos dev)."
        ),
    )
    session_timeout_ms: int = Field(
        6000,
        ge=1000,
        le=60_000,
        description=(
            "Election session timeout: a master silent this long loses its role (a kill -9 "
            "fails over after about this much). Apache Kafka refuses less than its "
            "group.min.session.timeout.ms (6,000 by default)."
        ),
    )
    heartbeat_interval_ms: int = Field(
        1000,
        ge=100,
        description=(
            "Election heartbeat interval; at most a third of session_timeout_ms (Kafka's "
            "advice: a member misses a heartbeat or two before the coordinator drops it)."
        ),
    )
    transaction_max_records: int = Field(
        5000,
        ge=1,
        description=(
            "Most due messages per delivery transaction (a burst is split into several): "
            "read_committed consumers of a target wait while a transaction is open."
        ),
    )
    transaction_interval_ms: int = Field(
        5,
        ge=0,
        description=(
            "Shortest time between two delivery transactions: what is due meanwhile shares "
            "one commit (each commit is a few broker round trips). At 10,000 msg/s on 2 cores, "
            "20 ms gave p99 145-277 ms at visibility, 5 ms 130 ms (docs/benchmarks)."
        ),
    )
    progress_interval_ms: int = Field(
        250,
        ge=10,
        description=(
            "Longest time between two progress records while nothing is due: how far behind "
            "the master a backup's view of the committed progress may be, and the master's "
            "heartbeat for suspect_after_ms."
        ),
    )
    suspect_after_ms: int = Field(
        1500,
        ge=100,
        description=(
            "A backup that watched the progress topic's end stand still this long (the master "
            "commits at least every progress_interval_ms) takes over without waiting for the "
            "election's session timeout; fencing makes a false suspicion cost one handover, "
            "not a duplicate (chronos/group/master_watch.py). 0 lost, 0 duplicates and "
            "failover p50/max in docs/replica-groups.md. At least "
            f"{SUSPECT_PER_PROGRESS} times progress_interval_ms: a live master must not look "
            "quiet between two of its commits."
        ),
    )
    transaction_timeout_ms: int = Field(
        10_000,
        ge=1000,
        description=(
            "Kafka aborts a delivery transaction left open this long (a master frozen "
            "mid-transaction); its records never become visible."
        ),
    )
    rate_lookahead_ms: int = Field(
        10_000,
        ge=0,
        le=3_600_000,
        description=(
            "How far ahead of now a master plans the messages of topics with a rate "
            "(delivery.topics.<t>.rate): a burst scheduled at least this long ahead is spread "
            "over its slots before it is due, so that at due time it neither holds back other "
            "topics nor goes out faster than the rate. A message that arrives after the "
            "look-ahead passed its slot is planned as it falls due, behind its topic's "
            "backlog. 0: plan only as messages fall due."
        ),
    )
    takeover_catch_up_s: float = Field(
        30.0,
        gt=0,
        description=(
            "Longest a new master waits for ingest to reach the inner topic's end before it "
            "delivers anyway (what arrives later is delivered as a late arrival)."
        ),
    )

    @model_validator(mode="after")
    def _couplings(self) -> GroupSettings:
        """Settings that only work in proportion to each other: refused with the reason,
        instead of a group that suspects a live master or loses members to missed heartbeats."""
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            raise ValueError(
                f"group.heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be at most a "
                f"third of group.session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.suspect_after_ms < SUSPECT_PER_PROGRESS * self.progress_interval_ms:
            raise ValueError(
                f"group.suspect_after_ms ({self.suspect_after_ms}) must be at least "
                f"{SUSPECT_PER_PROGRESS} times group.progress_interval_ms "
                f"({self.progress_interval_ms}): a live master commits only that often while "
                "nothing is due"
            )
        return self


class ClusterSettings(_Section):
    """A cluster of nodes sharing the inner topic's partitions (docs/clusters.md). Without a
    name a node is alone or a replica of ``group.name``."""

    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,48}$",
        description=(
            "Cluster of this node. Nodes naming the same cluster join one Kafka consumer group; "
            "from its members every node places each inner partition on an owner and "
            "standby_replicas standbys (chronos/cluster/placement.py). Each partition a node "
            "hosts is a replica group of its own (group.* timings apply), delivered by its "
            "owner in transactions fenced per partition. Excludes group.name and "
            "node.owned_partitions."
        ),
    )
    shape: Literal["partition", "node"] = Field(
        "partition",
        description=(
            "partition: each hosted partition is a replica group of its own (its own decoder, "
            "consumer, producer and progress reader). node: one ingest, one store, one "
            "producer and one delivery loop per node for every partition it hosts, ownership "
            "decided by claims in each partition's progress log (docs/clusters.md, "
            "docs/design/cluster-v2.md)."
        ),
    )
    standby_replicas: int = Field(
        1,
        ge=0,
        le=8,
        description=(
            "Other nodes that keep each partition's store warm: the first takes over when the "
            "owner fails, without a restore."
        ),
    )
    drop_unhosted_after_s: float = Field(
        60.0,
        ge=0,
        description=(
            "Node shape: how long a partition a node no longer hosts is kept (ingested, "
            "followed, warm) before it is dropped, once the nodes it is placed on hold it. A "
            "node that leaves and comes back within this time (a rolling restart) moves "
            "nothing to disk and back: dropping at once made each leave a restore."
        ),
    )
    ingest_linger_ms: int = Field(
        20,
        ge=0,
        le=1000,
        description=(
            "Node shape: while inner records flow, how long a member's ingest waits for more "
            "after the first of a read, and how long after a fetch that returned records "
            "its partitions wait to be fetched again (0: neither). Under load each fetch "
            "carries a few records, names every hosted partition and costs the broker per "
            "partition, and every batch costs a write per partition it touches. At rest a "
            "record is never held; under load one waits up to about a linger for its fetch "
            "and another for its read."
        ),
    )
    progress_linger_ms: int = Field(
        100,
        ge=0,
        le=1000,
        description=(
            "Node shape: while progress flows, how long after a fetch that returned records a "
            "member's reader of the progress logs (its standby copies' and every member's "
            "node log) fetches again (0: at once). Each committed transaction of any member "
            "answers that fetch: under load one fetch per commit, on every member. A standby "
            "copy and the claims then trail the owner's commits by up to this long."
        ),
    )
    transaction_linger_ms: int = Field(
        50,
        ge=0,
        le=1000,
        description=(
            "Node shape: while deliveries flow (the last transaction carried several "
            "messages), a member's next transaction begins this long after the last commit "
            "instead of group.transaction_interval_ms: fewer, larger transactions under load "
            "(each costs the broker a commit marker per partition it touches). At rest "
            "nothing waits; a message due right after a busy commit waits at most this "
            "long. 0: off."
        ),
    )
    fence_check_ms: int = Field(
        3_000,
        ge=100,
        description=(
            "Node shape: a member that committed nothing for this long commits one idle cut, "
            "so that a member fenced while it had nothing due (frozen, then thawed) learns it "
            "within this time and gives up the partitions it no longer holds. One small "
            "transaction per period per node, whatever its partitions."
        ),
    )
    membership_interval_ms: int = Field(
        500,
        ge=50,
        description=(
            "How often a node asks Kafka who the cluster's members are. A node killed stays a "
            "member until group.session_timeout_ms; a standby's watch takes over its partitions "
            "before that (group.suspect_after_ms)."
        ),
    )
    admin_url: str | None = Field(
        None,
        pattern=r"^https?://[^/\s]+$",
        description=(
            "Where the other nodes reach this node's admin API (status by id routed to the "
            "id's owner, listing and forecast across the cluster), e.g. http://10.0.0.5:9400. "
            "Unset: http://<admin.host>:<its port>, with this machine's host name when "
            "admin.host listens on every address."
        ),
    )
    peer_token: SecretStr | None = Field(
        None,
        description="Bearer token (with the admin operation) this node presents to the other "
        "nodes' admin APIs when they require one (security.tokens_file).",
    )


#: ``delete`` defaults in compact mode. There a delivered id the store remembers is live state
#: in Kafka that every restore reads (``rate x retention_s`` records), so the idempotency window
#: is short by default: minutes of 10,000 msg/s would take a restore past a minute
#: (``scripts/restore_check.py``, docs/design/live-state.md).
COMPACT_DELETE_DEFAULTS: dict[str, float] = {"retention_s": 60.0, "interval_s": 30.0}


class DeleteSettings(_Section):
    """The delete worker: drops delivered data behind the seek timestamp."""

    interval_s: float = Field(
        600.0,
        gt=0,
        description="How often the delete worker runs (compact mode's default: 30 s).",
    )
    retention_s: float = Field(
        6 * 3600.0,
        ge=0,
        description=(
            "Keep delivered data this long behind the seek timestamp: the idempotency window "
            "(a re-sent id is not scheduled again) and status lookups. Compact mode's default "
            "is 60 s: there each remembered id is a record every restore reads."
        ),
    )
    tombstone_retention_s: float = Field(
        7 * 86400.0, ge=0, description="Remember cancels of unknown ids this long."
    )


class RebuildSettings(_Section):
    """Keeping every pending message rebuildable from Kafka (docs/rebuild.md).

    The delivering node re-appends what its store holds (pending messages, delivered ones still
    inside the idempotency window, cancel tombstones) to the inner topic once per
    ``refresh_interval_s`` and then publishes the *rebuild floor*: the inner offsets below
    which no record is needed any more. Retention may remove records older than that.
    """

    mode: Literal["refresh", "compact"] = Field(
        "refresh",
        description=(
            "How Kafka keeps every live message: `refresh` re-appends the store to an inner "
            "topic with cleanup.policy=delete every refresh_interval_s; `compact` keeps the "
            "inner topic compacted by id, the delivering node restating an id whose last "
            "record stopped stating it and writing a tombstone when it leaves the store "
            "(docs/design/live-state.md; Apache Kafka only). Every node of a cluster uses "
            "the same mode; `chronos topics fix` sets the topic's configuration for it."
        ),
    )
    refresh_interval_s: float = Field(
        86_400.0,
        gt=0,
        description=(
            "Longest time between two refresh passes. The inner topic's retention.ms must be "
            "at least twice this (or -1), else a record could expire before its refresh: "
            "the node refuses to start (check_inner_topic)."
        ),
    )
    refresh_rate: int = Field(
        20_000,
        ge=1,
        description=(
            "Most refresh records produced per second during a pass, so a pass over millions "
            "of pending messages does not crowd out deliveries."
        ),
    )
    accept_incomplete: bool = Field(
        False,
        description=(
            "Let a node alone start although its store began reading the inner topic after "
            "records it needs were removed (it refuses by default, naming what is missing), "
            "and a cluster member of the node shape stand for such a partition (it never "
            "does by default: member_store_incomplete in its log): the messages recorded only "
            "there are lost."
        ),
    )
    check_inner_topic: bool = Field(
        True,
        description=(
            "At start, refuse an inner topic whose cleanup.policy, retention.ms or "
            "retention.bytes could remove a record of a pending message "
            "(`chronos topics fix` sets them)."
        ),
    )


class ProxySettings(_Section):
    """The HTTP front door."""

    host: str = Field("127.0.0.1", description="HTTP listen address.")
    port: int = Field(8080, ge=0, le=65535, description="HTTP listen port.")
    ack_timeout_s: float = Field(30.0, gt=0, description="Longest wait for Kafka's ack.")
    batch_max: int = Field(10_000, ge=1, description="Most messages in one batch request.")
    status_nodes: list[str] = Field(
        default_factory=list,
        description="Admin API base URLs of the nodes (http://host:port) that answer "
        "GET /v1/messages/{id} and `chronos status`: a ready master (or node alone) first, "
        "else a ready backup.",
    )
    status_token: SecretStr | None = Field(
        None,
        description="Bearer token (with the admin operation) presented to status_nodes when "
        "their admin APIs require one (security.tokens_file).",
    )
    scope_ids: bool = Field(
        True,
        description="Ids per tenant: a token limited to some topics sends and asks about ids "
        "as '<token name>:<id>' on the wire, so tenants can neither collide nor see each "
        "other's ids (docs/security.md). Every proxy of a deployment must agree.",
    )
    sticky_ids_ms: int = Field(
        10,
        ge=0,
        le=60_000,
        description="For this long, the ids a proxy makes up (requests without an id) all "
        "land in one inner partition, then in another: fewer, larger batches per partition "
        "(Kafka's sticky partitioner, KIP-480, for the ids the proxy chooses; "
        "proxy/sticky_ids.py). Over 16 inner partitions at 2,000 requests/s it roughly "
        "halved the broker's CPU per record. A caller's own id lands where it hashes. "
        "0: random ids.",
    )
    inline_body_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="A schedule body up to this size is parsed and validated on the event "
        "loop; a larger one by a body worker, so that it cannot stall other connections.",
    )
    body_workers: int = Field(
        1,
        ge=0,
        le=64,
        description="Processes that parse, validate, encode and produce schedule bodies larger "
        "than inline_body_bytes, each one body at a time (0: every body on the event loop).",
    )
    body_queue: int = Field(
        64,
        ge=0,
        description="Large bodies waiting for a body worker (their bytes count against "
        "security.max_bodies_bytes); past it, 503 with Retry-After.",
    )
    inline_cpu_ms: int = Field(
        20,
        ge=1,
        description="A body read on the event loop's side whose messages take more CPU than "
        "this to validate is handed to a body worker, read again there (cron repeats cost "
        "more than their bytes); with body_workers 0, request_cpu_ms alone bounds it.",
    )
    request_cpu_ms: int = Field(
        5_000,
        ge=1,
        description="Most CPU one request's messages may take to validate, on the event "
        "loop's threads or in a body worker (a cron repeat or many headers cost more than "
        "their bytes); past it, 413.",
    )


class AdminSettings(_Section):
    """A node's admin HTTP API: health, readiness, Prometheus metrics."""

    enabled: bool = Field(True, description="Serve the admin API from every node.")
    host: str = Field(
        "127.0.0.1",
        description="Listen address; loopback by default (beyond it, security.tokens_file is "
        "required).",
    )
    port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Listen port; 0: a free port, logged as admin_listening (set one for probes "
        "and scraping; several nodes on one machine need different ports).",
    )
    outcomes: bool = Field(
        True,
        description="Keep where each delivered message went (partition, offset, or the "
        "dead-letter reason) for status lookups, until delete.retention_s drops it; only with "
        "the admin API enabled. About 25 bytes plus the message key per delivery, in one "
        "RocksDB put per progress commit.",
    )
    list_scan_max: int = Field(
        100_000,
        ge=1_000,
        description="Most stored messages one listing page reads while filtering by topic or "
        "state; a page that reached it returns fewer rows and a cursor to go on from.",
    )
    kafka_silence_s: float = Field(
        10.0,
        gt=0,
        description="/readyz fails (check kafka) when the cancel gate's proof that every "
        "acknowledged inner record was taken care of is older than this: Kafka did not answer "
        "(down, frozen, unreachable) or ingest fell that far behind; delivery is held then.",
    )

    @property
    def keeps_outcomes(self) -> bool:
        """Whether delivering records outcomes: the API that reads them must be there."""
        return self.enabled and self.outcomes


class SecuritySettings(_Section):
    """Authentication, TLS and request bounds of the HTTP surfaces (the proxy, the admin API);
    see docs/security.md."""

    tokens_file: Path | None = Field(
        None,
        description="TOML file of bearer tokens (hashed; `chronos token` makes one), re-read "
        "within a second when it changes. Unset: no authentication, allowed only while the "
        "proxy and admin API listen on loopback.",
    )
    max_body_bytes: int = Field(
        16 * 2**20,
        ge=1024,
        description="Largest request body read; larger ones get 413 before being read.",
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="Longest time a client may take to send a request body (408)."
    )
    max_bodies_bytes: int = Field(
        256 * 2**20,
        ge=1024,
        description="Most bytes of request bodies held at once, all requests together (each "
        "up to max_body_bytes); past it, 503 with Retry-After. Bounds the memory bodies take.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Longest time a connection may take to send a whole request head, from "
        "its opening or from the previous response (408, then closed).",
    )
    max_connections: int = Field(
        1024,
        ge=16,
        description="Connections held at once per HTTP surface (at most half the open-files "
        "limit); past it, the one that has waited longest for a request head is closed.",
    )
    tls_certfile: Path | None = Field(
        None, description="PEM certificate chain: serve the proxy and admin API over HTTPS."
    )
    tls_keyfile: Path | None = Field(None, description="PEM private key of tls_certfile.")


class LogSettings(_Section):
    """Logging output."""

    level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    format: Literal["console", "json"] = Field("console", description="Log renderer.")


class ChronosSettings(BaseSettings):
    """Root of the settings tree. Sources, strongest first: environment, TOML file, defaults.

    Environment variables are ``CHRONOS_<SECTION>__<FIELD>``, e.g.
    ``CHRONOS_KAFKA__BOOTSTRAP_SERVERS=broker:9092``.
    """

    model_config = SettingsConfigDict(
        env_prefix="CHRONOS_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    topics: TopicSettings = Field(default_factory=TopicSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    node: NodeSettings = Field(default_factory=NodeSettings)
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    group: GroupSettings = Field(default_factory=GroupSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    delete: DeleteSettings = Field(default_factory=DeleteSettings)
    rebuild: RebuildSettings = Field(default_factory=RebuildSettings)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @model_validator(mode="before")
    @classmethod
    def _mode_defaults(cls, data: Any) -> Any:
        """Compact mode's own defaults for what an operator left unset in ``delete``
        (``COMPACT_DELETE_DEFAULTS``); whatever was set, in a file, the environment or code,
        stands."""
        if not isinstance(data, dict):
            return data
        rebuild = data.get("rebuild")
        mode = rebuild.get("mode") if isinstance(rebuild, dict) else getattr(rebuild, "mode", None)
        if mode != "compact":
            return data
        delete = data.get("delete")
        if isinstance(delete, DeleteSettings):
            unset = {
                name: value
                for name, value in COMPACT_DELETE_DEFAULTS.items()
                if name not in delete.model_fields_set
            }
            return {**data, "delete": delete.model_copy(update=unset)}
        given = dict(delete) if isinstance(delete, Mapping) else {}
        return {**data, "delete": COMPACT_DELETE_DEFAULTS | given}

    @model_validator(mode="after")
    def _one_way_to_share(self) -> ChronosSettings:
        """A cluster places partitions itself: a group name or hand-split partitions beside it
        would be a second, conflicting answer to who delivers what."""
        if self.cluster.name is None:
            return self
        if self.group.name is not None:
            raise ValueError("cluster.name and group.name exclude each other: set one")
        if self.node.owned_partitions:
            raise ValueError(
                "node.owned_partitions is for nodes alone; a cluster places partitions itself "
                "(leave it empty with cluster.name)"
            )
        return self


#: Environment variables with the CHRONOS_ prefix that are not settings: the test harness's
#: (this prefix), and the tools' own (``TOOL_VARIABLES``). A chronos command must start with
#: any of them set, as a developer's shell or a test's child process has them.
_NOT_SETTINGS_PREFIX = "CHRONOS_TEST_"
#: The tools' variables: the local Apache Kafka's version and jars (``devstack/kafka.py``),
#: where the bench installs other revisions (``bench/revision.py``), what the image scripts
#: build from and name (``docker/``). ``tests/unit/test_settings.py`` finds every variable
#: the repository reads and holds this list to it.
TOOL_VARIABLES = frozenset(
    {
        "CHRONOS_KAFKA_VERSION",
        "CHRONOS_KAFKA_LIBS",
        "CHRONOS_REVISIONS_DIR",
        "CHRONOS_PYTHON_BASE",
        "CHRONOS_JAVA_BASE",
        "CHRONOS_REBUILD_BASE",
        "CHRONOS_SOURCE",
        "CHRONOS_TAG",
    }
)


def _check_environment(environ: Mapping[str, str]) -> None:
    """Reject CHRONOS_* variables that name no settings section (e.g. one underscore short),
    which pydantic-settings would otherwise ignore silently."""
    sections = set(ChronosSettings.model_fields)
    for name in environ:
        upper = name.upper()
        if not upper.startswith("CHRONOS_") or upper.startswith(_NOT_SETTINGS_PREFIX):
            continue
        if upper in TOOL_VARIABLES:
            continue
        section, sep, _field = upper.removeprefix("CHRONOS_").partition("__")
        if section.lower() not in sections or not sep:
            raise ConfigError(
                f"environment variable {name} names no setting; expected "
                f"CHRONOS_<SECTION>__<FIELD> with SECTION one of {sorted(sections)}"
            )


def load_settings(path: Path | None = None, **overrides: Any) -> ChronosSettings:
    """Build the settings tree from an optional TOML file, the environment and ``overrides``.

    Raises ConfigError naming the bad key, so a typo never silently falls back to a default.
    """
    if path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    _check_environment(os.environ)

    class _FromFile(ChronosSettings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
            if path is not None:
                sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
            return tuple(sources)

    try:
        loaded = _FromFile(**overrides)
    except PydanticValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid settings ({path or 'environment'}): {problems}") from exc
    except ValueError as exc:  # malformed TOML
        raise ConfigError(f"cannot read settings file {path}: {exc}") from exc
    return loaded

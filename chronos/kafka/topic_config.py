"""The inner topic's settings: refused at start when a pending message could outlive its
record, advised when deliveries would be later than they need be, and repaired by
``chronos topics fix``.

The node that delivers re-appends ("refreshes") every pending message to the inner topic at
least every ``rebuild.refresh_interval_s`` (docs/rebuild.md). A replica rebuilds
its store from the inner topic, so the topic must keep each record until its refresh is
written. That holds iff

- ``cleanup.policy`` is exactly ``delete``: compaction (alone or with ``delete``) keeps the
  latest record of a key, a later duplicate add instead of the first one, which changes what a
  rebuilt replica schedules;
- ``retention.bytes`` is ``-1``: size-based deletion can remove any record, however recent;
- ``retention.ms`` is ``-1`` or at least twice ``rebuild.refresh_interval_s``.

One setting is advice, not safety: ``message.timestamp.type`` ``LogAppendTime`` has the broker
stamp every record with its append time, which the cancel gate takes as proof of ingest's
progress without a round trip (``node/watermark.py``); with ``CreateTime`` (Kafka's default)
the gate waits for its probes, and deliveries run later under load. A node starts either way,
logging ``timestamp_advice``.

``local.retention.*`` (tiered storage) is ignored: records moved to remote storage are still
read by consumers.

What the brokers answer to DescribeConfigs for a topic (checked against both):

- Apache Kafka: every topic config, defaults included (source ``DEFAULT_CONFIG``);
  ``UNKNOWN_TOPIC_OR_PART`` for a topic that does not exist.
- Tansu 0.6 (``chronos dev``): only the configs set explicitly on the topic (at creation or by
  IncrementalAlterConfigs), an empty answer for a topic created without any and for a topic
  that does not exist. A missing name there does not mean Kafka's default, so such an answer
  is taken as "the broker cannot tell" (:func:`read_topic_config` returns None).
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Mapping

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# Defined in these private modules; confluent_kafka.admin re-exports them only implicitly,
# which strict mypy (no_implicit_reexport) rejects.
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType

from chronos.errors import ConfigError
from chronos.kafka import compacted_config
from chronos.kafka.clients import KafkaClients
from chronos.kafka.config_values import (
    CLEANUP_POLICY,
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE,
    integer,
    policies,
    timestamp_advice,
)
from chronos.settings import ChronosSettings, RebuildSettings

log = structlog.get_logger(__name__)

RETENTION_BYTES = "retention.bytes"
RETENTION_MS = "retention.ms"
#: The topic configs the check reads; an answer without one of them cannot be checked.
CHECKED = (CLEANUP_POLICY, RETENTION_BYTES, RETENTION_MS)

#: Errors with which a broker says it does not implement DescribeConfigs.
_UNSUPPORTED = frozenset({KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION})

#: How to repair what :func:`check_inner_topic` refuses.
REMEDY = (
    "run `chronos topics fix` (or set them with kafka-configs.sh) "
    "or set rebuild.check_inner_topic = false"
)


def required_retention_ms(refresh_interval_s: float) -> int:
    """The shortest safe ``retention.ms``: twice the refresh interval, in whole milliseconds
    (rounded up)."""
    return math.ceil(2 * refresh_interval_s * 1000)


def inner_topic_problems(config: Mapping[str, str], refresh_interval_s: float) -> list[str]:
    """Each way the inner topic's ``config`` (name -> value, as DescribeConfigs answers) could
    remove the record of a pending message before its refresh, as one sentence naming the
    setting, its value, what is required and why; empty when the topic is safe."""
    problems: list[str] = []
    required_ms = required_retention_ms(refresh_interval_s)

    policy = config.get(CLEANUP_POLICY)
    if policy is None:
        problems.append(
            "cleanup.policy of the inner topic is not reported by the broker; it must be "
            "delete: compaction could keep a later duplicate add of a message instead of the "
            "first one"
        )
    elif policies(policy) != {"delete"}:
        if "compact" in policies(policy):
            why = (
                "compaction keeps the latest record of a message id, a later duplicate add "
                "instead of the first one, which changes what a rebuilt replica schedules "
                "(a compacted inner topic needs rebuild.mode = compact)"
            )
        else:
            why = "only delete is known to keep every record for retention.ms"
        problems.append(f"cleanup.policy={policy} on the inner topic is not exactly delete: {why}")

    size = config.get(RETENTION_BYTES)
    if size is None:
        problems.append(
            "retention.bytes of the inner topic is not reported by the broker; it must be -1: "
            "size-based deletion can remove the record of any pending message"
        )
    elif integer(size) != -1:
        problems.append(
            f"retention.bytes={size} on the inner topic is not -1: size-based deletion can "
            "remove the record of any pending message, however recently it was refreshed"
        )

    age = config.get(RETENTION_MS)
    if age is None:
        problems.append(
            "retention.ms of the inner topic is not reported by the broker; it must be -1 or "
            f"at least 2 x rebuild.refresh_interval_s ({required_ms} ms): a pending message's "
            "record could be removed before it is refreshed"
        )
    else:
        ms = integer(age)
        if ms is None or (ms != -1 and ms < required_ms):
            problems.append(
                f"retention.ms={age} on the inner topic is shorter than 2 x "
                f"rebuild.refresh_interval_s ({required_ms} ms; set it to at least that, or "
                "-1): a pending message's record could be removed before it is refreshed"
            )
    return problems


def problems_for(config: Mapping[str, str], rebuild: RebuildSettings) -> list[str]:
    """The problems of ``config`` for the node's ``rebuild.mode``: refresh passes need every
    record kept (:func:`inner_topic_problems`), compact mode the last one of each id
    (``compacted_config.problems``)."""
    if rebuild.mode == "compact":
        return compacted_config.problems(config)
    return inner_topic_problems(config, rebuild.refresh_interval_s)


def advice_for(config: Mapping[str, str], rebuild: RebuildSettings) -> list[str]:
    """The advice on ``config`` for the node's ``rebuild.mode``."""
    if rebuild.mode == "compact":
        return compacted_config.advice(config)
    return timestamp_advice(config)


def _reason(topic: str, error: KafkaError, permission: str) -> str:
    """Why a config request on ``topic`` failed, with the likely cause when Kafka names one."""
    if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return f"topic {topic} does not exist (run with topics.create = true)"
    if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return f"{error.str()}: chronos' principal may lack {permission} on topic {topic}"
    return error.str()


def read_topic_config(admin: AdminClient, topic: str, timeout_s: float) -> dict[str, str] | None:
    """The configuration of ``topic`` (name -> value), from DescribeConfigs.

    Returns None when the broker cannot tell: it does not implement DescribeConfigs, or its
    answer lacks one of :data:`CHECKED` (Tansu 0.6 answers with only the configs set
    explicitly on the topic, so there a missing name does not mean the default). Any other
    failure (Kafka unreachable, topic missing, not authorized) raises ConfigError with the
    reason.
    """
    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        futures = admin.describe_configs([resource], request_timeout=timeout_s)
        entries = futures[resource].result(timeout_s)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() in _UNSUPPORTED:
            return None
        raise ConfigError(
            f"cannot read the configuration of topic {topic}: "
            f"{_reason(topic, error, 'DESCRIBE_CONFIGS')}"
        ) from exc
    except concurrent.futures.TimeoutError as exc:
        raise ConfigError(
            f"cannot read the configuration of topic {topic}: no answer within {timeout_s} s"
        ) from exc
    config = {name: entry.value for name, entry in entries.items() if entry.value is not None}
    if any(name not in config for name in CHECKED):
        return None
    return config


def _admin(settings: ChronosSettings) -> AdminClient:
    return KafkaClients(settings.kafka, settings.node.node_id).admin()


def check_inner_topic(settings: ChronosSettings, timeout_s: float = 30.0) -> None:
    """Refuse an inner topic that could remove a pending message's record before its refresh.

    Raises ConfigError listing every problem (and how to repair them), or when the
    configuration cannot be read; logs ``inner_topic_config_unknown`` and returns when the
    broker cannot tell (see :func:`read_topic_config`), and ``timestamp_advice`` for what
    only makes deliveries later. Whether to check at all (``rebuild.check_inner_topic``) is
    the caller's decision.
    """
    topic = settings.topics.names.inner
    config = read_topic_config(_admin(settings), topic, timeout_s)
    if config is None:
        log.warning(
            "inner_topic_config_unknown",
            topic=topic,
            bootstrap=settings.kafka.bootstrap_servers,
            reason="the broker does not report the topic's effective configuration",
        )
        return
    for advice in advice_for(config, settings.rebuild):
        log.warning("inner_topic_advice", topic=topic, advice=advice, fix="chronos topics fix")
    problems = problems_for(config, settings.rebuild)
    if problems:
        raise ConfigError(
            f"the inner topic {topic} could lose the record of a pending message: "
            + "; ".join(problems)
            + f"; {REMEDY}"
        )


def _wanted(config: Mapping[str, str], refresh_interval_s: float) -> dict[str, str]:
    """What :func:`fix_inner_topic` sets (name -> new value): only what is not safe yet."""
    changes: dict[str, str] = {}
    if policies(config.get(CLEANUP_POLICY, "")) != {"delete"}:
        changes[CLEANUP_POLICY] = "delete"
    if integer(config.get(RETENTION_BYTES, "")) != -1:
        changes[RETENTION_BYTES] = "-1"
    required = required_retention_ms(refresh_interval_s)
    current = integer(config.get(RETENTION_MS, ""))
    if current is None or (current != -1 and current < required):
        changes[RETENTION_MS] = str(required if current is None else max(current, required))
    if timestamp_advice(config):
        changes[TIMESTAMP_TYPE] = LOG_APPEND_TIME
    return changes


def fix_inner_topic(settings: ChronosSettings, timeout_s: float = 30.0) -> dict[str, str]:
    """Make the inner topic safe for ``rebuild.mode``; in compact mode what
    ``compacted_config.wanted`` names, in refresh mode ``cleanup.policy=delete``,
    ``retention.bytes=-1`` and ``retention.ms`` at least twice ``rebuild.refresh_interval_s``
    (a longer one, or -1, is kept), with IncrementalAlterConfigs; and
    ``message.timestamp.type=LogAppendTime`` where the broker reports another.

    Returns what it changed (name -> new value), empty when nothing needed changing; returns
    once the broker reports the new values. Raises ConfigError when the configuration cannot
    be read or changed, or the broker cannot tell what it is (see :func:`read_topic_config`).
    """
    topic = settings.topics.names.inner
    admin = _admin(settings)
    config = read_topic_config(admin, topic, timeout_s)
    if config is None:
        raise ConfigError(
            f"the broker at {settings.kafka.bootstrap_servers} does not report the "
            f"configuration of topic {topic}, so chronos cannot tell what to change; set "
            "cleanup.policy=delete, retention.bytes=-1 and retention.ms (-1 or at least "
            f"{required_retention_ms(settings.rebuild.refresh_interval_s)}) with the broker's "
            "own tools"
        )
    if settings.rebuild.mode == "compact":
        changes = compacted_config.wanted(config)
    else:
        changes = _wanted(config, settings.rebuild.refresh_interval_s)
    if not changes:
        return {}
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in changes.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    try:
        futures = admin.incremental_alter_configs([resource], request_timeout=timeout_s)
        futures[resource].result(timeout_s)
    except KafkaException as exc:
        raise ConfigError(
            f"cannot change the configuration of topic {topic}: "
            f"{_reason(topic, exc.args[0], 'ALTER_CONFIGS')}"
        ) from exc
    except concurrent.futures.TimeoutError as exc:
        raise ConfigError(
            f"cannot change the configuration of topic {topic}: no answer within {timeout_s} s"
        ) from exc
    log.info("inner_topic_config_changed", topic=topic, **changes)
    _await_reported(admin, topic, changes, timeout_s)
    return changes


def _await_reported(
    admin: AdminClient, topic: str, changes: Mapping[str, str], timeout_s: float
) -> None:
    """Wait until DescribeConfigs reports ``changes``: a broker answers from its metadata,
    which may follow the controller that applied them a moment later, and a node started
    right after ``chronos topics fix`` would refuse the old values."""
    deadline = time.monotonic() + timeout_s
    while True:
        config = read_topic_config(admin, topic, timeout_s) or {}
        if all(config.get(name) == value for name, value in changes.items()):
            return
        if time.monotonic() > deadline:
            reported = {name: config.get(name) for name in changes}
            raise ConfigError(
                f"Kafka accepted the new configuration of topic {topic} but still reports "
                f"{reported} after {timeout_s} s"
            )
        time.sleep(0.1)

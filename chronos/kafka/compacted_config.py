"""The inner topic's settings in compact mode (``rebuild.mode = "compact"``, issue 38).

A compacted inner topic keeps the last record of every id, and chronos keeps that record
stating the id's state (``docs/design/live-state.md``). What that needs from the topic:

- ``cleanup.policy`` exactly ``compact``: ``compact,delete`` also removes records by age or
  size, the last record of a pending id with them.
- ``delete.retention.ms`` at least :data:`MIN_TOMBSTONE_MS`: Kafka keeps a tombstone that long
  after cleaning, so a restore that read an id's earlier record still reads its tombstone
  (a cancel's expiry) as long as it reads the topic within that time.

What only bounds how much a restore reads (advice, set by ``chronos topics fix``): the cleaner
compacting soon (``min.cleanable.dirty.ratio``, ``max.compaction.lag.ms``, ``segment.bytes``),
and, as in refresh mode, ``message.timestamp.type=LogAppendTime`` for the cancel gate.
``scripts/compaction_probe.py`` measured these values (1 M live ids, 10,000 new ids/s).
"""

from __future__ import annotations

from collections.abc import Mapping

from chronos.kafka import config_values as values

TOMBSTONE_MS = "delete.retention.ms"

#: The shortest ``delete.retention.ms``: a restore reads the topic within it.
MIN_TOMBSTONE_MS = 60_000

#: What bounds a restore's head; the values the probe measured (name -> value).
CLEANER = {
    "min.cleanable.dirty.ratio": "0.1",
    "max.compaction.lag.ms": "60000",
    "segment.bytes": str(16 * 1024 * 1024),
}

#: What ``chronos topics fix`` sets on a topic it finds without a safe value.
TOMBSTONE_FIX_MS = 2 * MIN_TOMBSTONE_MS


def problems(config: Mapping[str, str]) -> list[str]:
    """Each way ``config`` (as DescribeConfigs answers) could remove the last record of a live
    id, one sentence each; empty when the topic is safe for compact mode."""
    found: list[str] = []
    policy = config.get(values.CLEANUP_POLICY)
    if policy is None or values.policies(policy) != {"compact"}:
        found.append(
            f"cleanup.policy={policy} on the inner topic is not exactly compact "
            "(rebuild.mode = compact): deletion by age or size would remove the last record "
            "of a pending message"
        )
    tombstone_ms = values.integer(config.get(TOMBSTONE_MS))
    if tombstone_ms is None or tombstone_ms < MIN_TOMBSTONE_MS:
        found.append(
            f"delete.retention.ms={config.get(TOMBSTONE_MS)} on the inner topic is shorter "
            f"than {MIN_TOMBSTONE_MS}: a restore could read a cancelled message's add and "
            "miss the tombstone that follows it"
        )
    return found


def advice(config: Mapping[str, str]) -> list[str]:
    """What in ``config`` makes a restore read more than it need (it loses nothing)."""
    said: list[str] = []
    for name, value in CLEANER.items():
        have = config.get(name)
        if have is not None and _worse(name, have, value):
            said.append(
                f"{name}={have} on the inner topic: the cleaner leaves more for a restore to "
                f"read than with {value}"
            )
    return said + values.timestamp_advice(config)


def _worse(name: str, have: str, wanted: str) -> bool:
    try:
        return float(have) > float(wanted)
    except ValueError:
        return True


def wanted(config: Mapping[str, str]) -> dict[str, str]:
    """What ``chronos topics fix`` sets (name -> value): only what is unsafe or advised."""
    changes: dict[str, str] = {}
    if values.policies(config.get(values.CLEANUP_POLICY, "")) != {"compact"}:
        changes[values.CLEANUP_POLICY] = "compact"
    tombstone_ms = values.integer(config.get(TOMBSTONE_MS))
    if tombstone_ms is None or tombstone_ms < MIN_TOMBSTONE_MS:
        changes[TOMBSTONE_MS] = str(TOMBSTONE_FIX_MS)
    for name, value in CLEANER.items():
        have = config.get(name)
        if have is None or _worse(name, have, value):
            changes[name] = value
    if values.timestamp_advice(config):
        changes[values.TIMESTAMP_TYPE] = values.LOG_APPEND_TIME
    return changes


def creation_config() -> dict[str, str]:
    """The inner topic's configuration when chronos creates it in compact mode."""
    return {
        values.CLEANUP_POLICY: "compact",
        TOMBSTONE_MS: str(TOMBSTONE_FIX_MS),
        **CLEANER,
        values.TIMESTAMP_TYPE: values.LOG_APPEND_TIME,
    }

"""Reading a topic's configuration as DescribeConfigs answers it (name -> string value): the
names and parsers both inner-topic modes judge with (``topic_config`` for refresh passes,
``compacted_config`` for compact mode), and the advice they share."""

from __future__ import annotations

from collections.abc import Mapping

CLEANUP_POLICY = "cleanup.policy"
TIMESTAMP_TYPE = "message.timestamp.type"
LOG_APPEND_TIME = "LogAppendTime"


def policies(value: str) -> set[str]:
    """``"compact,delete"`` (also ``"[compact, delete]"``) as ``{"compact", "delete"}``."""
    return {p.strip().lower() for p in value.strip().strip("[]").split(",") if p.strip()}


def integer(value: str | None) -> int | None:
    """A setting's whole number; None when absent or not a number."""
    try:
        return None if value is None else int(value.strip())
    except ValueError:
        return None


def timestamp_advice(config: Mapping[str, str]) -> list[str]:
    """What in the inner topic's ``config`` makes deliveries later than they need be (it loses
    nothing), as one sentence each; empty when nothing. A broker that does not report the
    setting gets no advice (Tansu keeps the producer's time whatever it is told)."""
    kind = config.get(TIMESTAMP_TYPE)
    if kind is None or kind == LOG_APPEND_TIME:
        return []
    return [
        f"{TIMESTAMP_TYPE}={kind} on the inner topic: the cancel gate then proves ingest's "
        "progress by probes only, and deliveries under load wait for them; LogAppendTime "
        "(chronos topics fix) lets records prove it as they are read"
    ]

"""Type aliases shared across chronos."""

from __future__ import annotations

from typing import TypeAlias

#: Epoch milliseconds (UTC).
EpochMs: TypeAlias = int
#: Record headers as confluent-kafka hands them over: name, value (bytes or None).
Headers: TypeAlias = list[tuple[str, bytes | None]]
#: A librdkafka configuration dictionary.
KafkaConfig: TypeAlias = dict[str, str | int | float | bool]

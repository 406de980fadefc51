"""The local stack: the two brokers (Apache Kafka from Maven Central jars, and Tansu, the
embedded default), node processes and delivery watchers for development, tests and benchmarks.

The broker kinds are named here, not in ``brokers.py``, so the CLI can offer them without
importing the brokers' modules."""

from __future__ import annotations

from typing import Literal

#: ``kafka``: Apache Kafka (KRaft) from Maven Central jars; ``tansu``: memory-only, zero setup.
BrokerKind = Literal["kafka", "tansu"]
BROKER_KINDS: tuple[BrokerKind, ...] = ("kafka", "tansu")

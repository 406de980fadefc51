"""The two local brokers behind one name: Apache Kafka (what users run) and Tansu (embedded)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from chronos.devstack import BROKER_KINDS as BROKER_KINDS
from chronos.devstack import BrokerKind as BrokerKind
from chronos.devstack.kafka import KafkaBroker
from chronos.devstack.tansu import TansuBroker


class LocalBroker(Protocol):
    """What the benchmarks and tools need of a broker they started themselves."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    def freeze(self) -> None:
        """SIGSTOP: an outage in which sockets stay open but nothing answers."""

    def thaw(self) -> None:
        """SIGCONT after :meth:`freeze`."""

    def stop(self) -> None: ...


def start_local_broker(kind: BrokerKind, log_path: Path) -> LocalBroker:
    """Start a fresh broker of ``kind`` writing its output to ``log_path``."""
    if kind == "kafka":
        return KafkaBroker(log_path=log_path).start()
    return TansuBroker(log_path=log_path).start()

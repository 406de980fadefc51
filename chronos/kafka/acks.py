"""Waiting for Kafka's answers to a bulk of records produced without waiting for each one
(a refresh pass, a migration): the delivery callback counts them down."""

from __future__ import annotations

import threading

from confluent_kafka import KafkaError


class Acks:
    """Counts records still waiting for Kafka's answer and keeps the first refusal."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.pending = 0
        self.failure: str | None = None

    def sent(self) -> None:
        with self._lock:
            self.pending += 1

    def done(self, error: KafkaError | None, _message: object) -> None:
        """The delivery callback of each record counted by ``sent``."""
        with self._lock:
            self.pending -= 1
            if error is not None and self.failure is None:
                self.failure = str(error)
            self._lock.notify_all()

    def wait(self, timeout_s: float, below: int = 1) -> bool:
        """Until fewer than ``below`` are outstanding; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self.pending < below, timeout_s)

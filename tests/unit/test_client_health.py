"""The client library's health answer: one question to Kafka stands for a second."""

from __future__ import annotations

from chronos.clock import FakeClock
from proxy.client import HEALTH_TTL_MS, DelayClient


def test_health_probes_coming_faster_than_a_second_share_one_question_to_kafka() -> None:
    class Answering:
        """Kafka's answers to metadata requests, counted."""

        def __init__(self) -> None:
            self.asked = 0
            self.up = True

        def ping(self, timeout_s: float) -> bool:
            self.asked += 1
            return self.up

    clock = FakeClock()
    client = DelayClient(clock=clock)
    kafka = Answering()
    client._started = kafka  # type: ignore[assignment]  # the producer's ping, counted
    assert all(client.healthy() for _ in range(50)) and kafka.asked == 1
    kafka.up = False
    clock.advance(HEALTH_TTL_MS - 1)
    assert client.healthy(), "an answer stands for a second"
    clock.advance(1)
    assert not client.healthy() and kafka.asked == 2
    clock.advance(-5_000)  # the wall clock stepped back: asked again, not trusted for ever
    assert not client.healthy() and kafka.asked == 3

"""``read_ready``: what a consumer holds, at once, without waiting for a full batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chronos.kafka.batches import read_ready


@dataclass
class HeldConsumer:
    """Holds ``held`` messages; records how long each read was allowed to wait."""

    held: list[str] = field(default_factory=list)
    waits: list[tuple[str, float]] = field(default_factory=list)

    def poll(self, timeout: float = -1) -> Any:
        self.waits.append(("poll", timeout))
        return self.held.pop(0) if self.held else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        self.waits.append(("consume", timeout))
        out, self.held = self.held[:num_messages], self.held[num_messages:]
        return out


def _read(consumer: HeldConsumer, most: int) -> list[Any]:
    return list(read_ready(consumer, most, 0.1))


def test_the_first_message_is_waited_for_and_the_rest_taken_without_waiting() -> None:
    """Mutant caught: ``consume(most, timeout)``, which librdkafka holds until the batch is full
    or the timeout passed (a handover noticed up to the timeout late)."""
    consumer = HeldConsumer(held=["a", "b", "c"])
    assert _read(consumer, 2) == ["a", "b"]
    assert consumer.waits == [("poll", 0.1), ("consume", 0)]
    assert _read(consumer, 5) == ["c"]
    assert _read(consumer, 5) == []
    assert _read(HeldConsumer(held=["x", "y"]), 1) == ["x"]

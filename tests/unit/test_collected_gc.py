"""What a check collects is taken out of the cyclic collector's walks (``Collected``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from chronos.devstack.watch import FREEZE_EVERY, Collected, Delivered


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def _delivered(n: int) -> Delivered:
    return Delivered(
        topic="t",
        id=f"id-{n}",
        due_ms=n,
        occurrence=1,
        produced_ms=n,
        key=None,
        value=b"v",
        headers=[("chronos-id", f"id-{n}".encode())],
    )


@pytest.mark.usefixtures("unfrozen")
def test_the_deliveries_kept_leave_the_collectors_walks() -> None:
    collected = Collected()
    kept = [_delivered(n) for n in range(FREEZE_EVERY)]
    for delivered in kept[:-1]:
        collected.add(delivered)
    assert gc.get_freeze_count() == 0  # nothing frozen before the count is reached
    collected.add(kept[-1])
    assert gc.get_freeze_count() >= len(kept)
    assert len(collected.every()) == FREEZE_EVERY

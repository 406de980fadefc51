"""Memory of cut-off bodies handed back: once per burst, not for small bodies."""

from __future__ import annotations

import asyncio

from chronos.web.memory import FreedBodies, glibc_malloc_trim


def test_a_burst_of_large_bodies_is_trimmed_once_after_it() -> None:
    """Mutant caught: a trim per request (a walk over every heap each time), or none."""

    async def scenario() -> tuple[list[int], int]:
        calls: list[int] = []
        trimmed = asyncio.Event()

        def trim(pad: int) -> int:
            calls.append(pad)
            trimmed.set()
            return 1

        freed = FreedBodies(trim, after_bytes=4 << 20, delay_s=0.01)
        for _ in range(3):
            freed.released(1 << 20)  # small ones alone are not worth a walk
        assert calls == []
        for _ in range(8):
            freed.released(16 << 20)  # a burst: one trim after it
        await asyncio.wait_for(trimmed.wait(), 10)
        trimmed.clear()
        freed.released(16 << 20)  # a later burst gets its own
        await asyncio.wait_for(trimmed.wait(), 10)
        return calls, freed.runs

    calls, runs = asyncio.run(scenario())
    assert calls == [0, 0] and runs == 2


def test_without_malloc_trim_the_garbage_is_still_collected() -> None:
    """musl or macOS: the reference cycles that hold cut-off bodies are collected anyway."""

    async def scenario() -> int:
        freed = FreedBodies(None, after_bytes=1, delay_s=0.0)
        freed.released(1 << 30)
        while freed.runs == 0:
            await asyncio.sleep(0.01)
        return freed.runs

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == 1


def test_glibc_has_malloc_trim() -> None:
    """The images and CI run on glibc (Debian): the trim must be found there."""
    trim = glibc_malloc_trim()
    assert trim is not None
    assert trim(0) in (0, 1)

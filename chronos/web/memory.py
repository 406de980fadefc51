"""Memory of request bodies the guard cut off, handed back to the system.

Why: a body refused mid-way (413 at ``security.max_body_bytes``, 408, 503) ends the framework's
read with an error whose traceback keeps the chunks read so far in a reference cycle; only a
full collection frees them, and large byte strings do not count towards the collector's
thresholds. Freed, the chunks (about 64 KiB each, below glibc's mmap threshold) stay in
malloc's heaps, which give back only their free top. Eight chunked uploads of 1 GiB each left
the proxy's RSS 130 MB higher (64 -> 195 MiB); a collection alone left it 24 MB higher; a
collection and ``malloc_trim(0)`` (the free pages of every heap) 0.3 MB
(``scripts/chunked_body_check.py``). Both walk everything, so they run once after a burst,
not per request. Other C libraries have no ``malloc_trim``: only the collection runs there.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
from collections.abc import Callable

#: Bytes of bodies cut off that make a collection and a trim worth their walk.
TRIM_AFTER_BYTES = 4 << 20
#: Seconds from the first large release to the hand-back: the rest of a burst is over by then.
TRIM_DELAY_S = 0.5


def glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS). Looked up in
    the symbols the process already has (``ctypes.util.find_library`` would run ``ldconfig``
    at every server's start)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class FreedBodies:
    """Counts the bytes of bodies cut off and, once enough were, collects the garbage and
    trims the heaps, on the event loop that serves them (one per HTTP surface)."""

    def __init__(
        self,
        trim: Callable[[int], int] | None,
        after_bytes: int = TRIM_AFTER_BYTES,
        delay_s: float = TRIM_DELAY_S,
    ) -> None:
        self._trim = trim
        self._after_bytes = after_bytes
        self._delay_s = delay_s
        self._released = 0
        self._scheduled = False
        #: Times the memory was handed back.
        self.runs = 0

    def released(self, size: int) -> None:
        """A cut-off body of ``size`` bytes is gone; called on the serving event loop."""
        self._released += size
        if self._released >= self._after_bytes and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_later(self._delay_s, self._run)

    def _run(self) -> None:
        self._scheduled = False
        self._released = 0
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        self.runs += 1

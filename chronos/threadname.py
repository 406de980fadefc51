"""The operating system's name of the calling thread, so ``top -H``, ``/proc`` and the
benchmark's per-stage CPU (``chronos.bench.sampler.thread_cpu``) can tell a node's threads
apart. CPython 3.11 names only its own ``threading.Thread`` objects, not the OS thread."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: ``prctl(PR_SET_NAME)``: Linux keeps 15 bytes of a thread's name.
_PR_SET_NAME = 15
_NAME_BYTES = 15


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def name_this_thread(name: str) -> bool:
    """Give the calling OS thread ``name`` (cut to 15 bytes); False where it cannot be done."""
    if _LIBC is None:
        return False
    raw = name.encode("ascii", "replace")[:_NAME_BYTES]
    return bool(_LIBC.prctl(_PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0) == 0)

"""The disk guard: stop writing to the store before RocksDB meets a full disk.

Why: a write that meets ``ENOSPC`` puts RocksDB into a read-only error state, and RocksDB's own
recovery (its SstFileManager) only looks for free space again every 5 s, with no way to ask it
sooner from Python (rocksdict exposes no ``DB::Resume``). So chronos keeps a reserve: while the
store's file system has less than ``store.min_free_mb`` free, writes are refused with
``StoreFull`` before RocksDB sees them; ingest holds its batch and the progress worker its seek
(delivery pauses after ``node.max_unpersisted_s``), and both go on as soon as space is back,
with no RocksDB error to recover from. A disk filled past the reserve at once (faster than
writes come) can still reach RocksDB; then delivery resumes when RocksDB has recovered.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from chronos.errors import ChronosError

#: How long one free-space reading is trusted (one ``statvfs`` per write batch would do too,
#: but writes come in thousands a second under load).
_RECHECK_S = 0.02


class StoreFull(ChronosError):
    """The store's disk has less free space than the reserve, or RocksDB met a full disk."""


class DiskGuard:
    """Free space of the store's file system against the reserve.

    Parameters:
        path: the store directory.
        min_free_bytes: the reserve; 0 turns the guard off.
    """

    def __init__(self, path: Path, min_free_bytes: int) -> None:
        self._path = str(path)
        self._min_free = min_free_bytes
        self._checked_at = 0.0
        self._free = min_free_bytes

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use there (``statvfs``)."""
        stats = os.statvfs(self._path)
        return stats.f_bavail * stats.f_frsize

    def check(self) -> None:
        """Raise ``StoreFull`` while free space is below the reserve."""
        if self._min_free <= 0:
            return
        now = time.monotonic()
        if now - self._checked_at >= _RECHECK_S:
            self._free = self.free_bytes()
            self._checked_at = now
        if self._free < self._min_free:
            raise StoreFull(
                f"the store's disk has {self._free >> 20} MiB free, below store.min_free_mb "
                f"({self._min_free >> 20} MiB)"
            )

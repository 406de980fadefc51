"""What the benchmark host has: memory (from /proc/meminfo) and the bytes a folder takes."""

from __future__ import annotations

from pathlib import Path


def meminfo_bytes(field: str, meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """A /proc/meminfo field (``MemTotal``, ``MemAvailable``) in bytes; None where not known."""
    try:
        lines = meminfo.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, rest = line.partition(":")
        if name == field:
            return int(rest.split()[0]) * 1024  # the kernel reports kB
    return None


def dir_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (its size on disk as a store reports it)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())

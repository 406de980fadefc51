"""Kafka's default partitioner for keyed records (Java's ``Utils.murmur2``, librdkafka's
``murmur2_random`` for non-null keys), so chronos can name the partition a producer that
follows the wire format put an id's records in (``wire.py``: partitioning by id with murmur2).

Written out because no maintained Python package offers it short of a whole Kafka client;
``tests/integration/test_partitioner.py`` checks it against librdkafka on a real broker.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data``, as an unsigned integer."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record keyed ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions

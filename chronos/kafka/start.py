"""Where a reader of a whole log starts.

Offset 0, not librdkafka's logical ``OFFSET_BEGINNING``: a logical offset is resolved with a
ListOffsets query before the first fetch, and a new consumer's first one waited about 500 ms
here every time (Apache Kafka 4.1.1: a fresh consumer assigned at ``OFFSET_BEGINNING`` read a
3-record log in 502 ms, at offset 0 in 21 ms). That wait is on the path of every claim and of
every partition a cluster member starts following again. An offset below the log's start
(records deleted) is reset to its earliest by ``auto.offset.reset``, which chronos' consumers
set to ``earliest`` (``KafkaSettings.consumer``); a compacted log keeps its start at 0.
"""

from __future__ import annotations

#: The first offset of a log read from its start (see the module's docstring).
FROM_START = 0

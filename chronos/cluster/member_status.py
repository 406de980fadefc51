"""What ``chronos cluster`` reports of a cluster of the node shape (``cluster.shape = "node"``):
per partition, who holds it and in which term, as its own progress log says (the claims'
compare-and-set, ``group/claims.py``), and which members say on the readiness board that
their copy stands.

Why not the partition shape's reading (``status.py``): there each partition is a replica group
whose progress topic moves with every delivery, and its master is whoever committed there
lately. A member writes a partition's own log at its claims, its handovers and the
transactions that carry repeat states; its other cuts go to the member's node log. So the
holder is read from the claims, and it delivers while it is a member of the cluster's group
and has not handed the partition over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from confluent_kafka import KafkaError, TopicPartition

from chronos.cluster.placement import Placement
from chronos.cluster.readiness import decode as decode_board
from chronos.group.claims import ClaimLog, Ownership
from chronos.kafka.admin import stable_end
from chronos.kafka.batches import read_ready
from chronos.kafka.clients import KafkaClients

#: Partitions' logs read at once (each its own consumer).
_PARALLEL = 8
_POLL_S = 0.2


@dataclass(frozen=True)
class Held:
    """A partition's holder as its log says: the node (None: nobody claimed it yet), its
    term, and whom it handed the partition to with its last cut (None: nobody)."""

    node: str | None
    term: int
    released_to: str | None


def holders(
    clients: KafkaClients,
    progress_topic: Callable[[int], str],
    partitions: int,
    reader_group: str,
    timeout_s: float,
) -> dict[int, Held]:
    """Each partition's holder: its progress log read to its last stable offset."""
    admin = clients.admin()  # held: a client dropped before its answer never answers
    errors = clients.errors("cluster-status")

    def read(partition: int) -> Held:
        topic = progress_topic(partition)
        end = stable_end(admin, topic, timeout_s)
        claims = ClaimLog(topic, 0, reader_group, clients.consumer, errors, inner=partition)
        try:
            if not claims.read_to(end, timeout_s):
                raise TimeoutError(f"{topic} was not read to offset {end} in {timeout_s} s")
            return _held(claims.ownership)
        finally:
            claims.close()

    with ThreadPoolExecutor(max_workers=_PARALLEL, thread_name_prefix="cluster-status") as pool:
        return dict(enumerate(pool.map(read, range(partitions))))


def _held(ownership: Ownership) -> Held:
    return Held(ownership.node, ownership.term, ownership.released_to)


@dataclass(frozen=True)
class BoardEntry:
    """What a member last said on the readiness board, and how long ago (by its record's
    timestamp)."""

    standing: frozenset[int]
    age_ms: int


def read_board(
    clients: KafkaClients, topic: str, reader_group: str, timeout_s: float
) -> dict[str, BoardEntry]:
    """Each member's last word on the readiness board (a one-partition compacted topic)."""
    consumer = clients.consumer(
        reader_group, clients.errors("cluster-status"), {"enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        if high <= low:
            return {}
        consumer.assign([TopicPartition(topic, 0, low)])
        said: dict[str, tuple[frozenset[int] | None, int]] = {}
        deadline = time.monotonic() + timeout_s
        position = low
        while position < high and time.monotonic() < deadline:
            for message in read_ready(consumer, 500, _POLL_S):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {error}")
                    continue
                position = max(position, (message.offset() or 0) + 1)
                key = message.key()
                if key is not None:
                    said[key.decode()] = (decode_board(message.value()), message.timestamp()[1])
        if position < high:
            raise TimeoutError(f"{topic} was not read to offset {high} in {timeout_s} s")
    finally:
        consumer.close()
    now_ms = int(time.time() * 1000)
    return {
        node: BoardEntry(standing, max(0, now_ms - at))
        for node, (standing, at) in said.items()
        if standing is not None
    }


def delivering(held: Held, members: frozenset[str]) -> str | None:
    """Who delivers a partition now: its holder while it is a member and has not handed the
    partition over; None while nobody does (a claim or a handover under way)."""
    if held.node is None or held.node not in members or held.released_to is not None:
        return None
    return held.node


def replica_states(
    partition: int,
    chain: list[str],
    held: Held,
    members: frozenset[str],
    board: Mapping[str, BoardEntry],
    stale_after_ms: int,
) -> dict[str, str | None]:
    """Each placed node's state for ``partition``: master (delivers it), eligible (its copy
    stands, said lately), or None (restoring, catching up, or silent)."""
    master = delivering(held, members)
    states: dict[str, str | None] = {}
    for node in dict.fromkeys([*chain, *([master] if master else [])]):
        entry = board.get(node)
        if node == master:
            states[node] = "master"
        elif entry is not None and entry.age_ms <= stale_after_ms and partition in entry.standing:
            states[node] = "eligible"
        else:
            states[node] = None
    return states


def placed_chain(placement: Placement, partition: int) -> list[str]:
    """The nodes the placement puts ``partition`` on, owner first."""
    return list(placement.hosts.get(partition, ()))

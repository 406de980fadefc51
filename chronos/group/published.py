"""What a node alone or a replica group published last (its progress log read to its end):
where a rebuilt store starts (``runtime/rebuild.py``) and what a migration into a cluster
carries over (``cluster/migrate.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from chronos.group.follower import ProgressLog, read_to_end
from chronos.kafka.admin import stable_end
from chronos.kafka.clients import KafkaClients
from chronos.schedule.progress_record import Cut, RepeatState
from chronos.settings import ChronosSettings


@dataclass(frozen=True)
class Published:
    """What a node alone published last: its cut and each repeat's state."""

    cut: Cut | None
    repeats: dict[str, RepeatState]


def read_published(
    settings: ChronosSettings, clients: KafkaClients, timeout_s: float = 30.0
) -> Published:
    """The progress this node's group (or, alone, this node) published, read to its end."""
    names = settings.topics.names
    node_id = settings.node.node_id
    group = settings.group.name
    topic = names.alone_progress(node_id) if group is None else names.progress(group)
    # A group's master writes in transactions: read to the stable offset (see read_to_end).
    end = None if group is None else stable_end(clients.admin(), topic, timeout_s)
    reader = ProgressLog(
        topic,
        names.progress_reader_group(node_id, "start"),
        clients.consumer,
        clients.errors("progress"),
    )
    try:
        cut, repeats = read_to_end(reader, timeout_s, end)
    finally:
        reader.close()
    return Published(cut, repeats)

"""Where a partition-shape cluster node keeps each partition's replica, and its settings.

The partition shape (``runtime/shard.py``) runs every hosted partition as a replica group of
its own; these pure functions name that replica's settings and store directory. They live in
``cluster/`` because ``cluster/status.py`` reads a partition's group through them without
starting anything.
"""

from __future__ import annotations

from pathlib import Path

from chronos.names import TopicNames
from chronos.settings import ChronosSettings


def shard_settings(settings: ChronosSettings, partition: int) -> ChronosSettings:
    """The settings of partition ``partition``'s replica on this node."""
    cluster = settings.cluster.name
    if cluster is None:
        raise ValueError("shard settings need cluster.name")
    node = settings.node.model_copy(
        update={
            # The replica's name in its partition's group (announcements, client ids,
            # handovers: ``Shard.hand_over``).
            "node_id": f"{settings.node.node_id}.p{partition}",
            "data_dir": shard_dir(settings.node.data_dir, partition),
            "owned_partitions": [partition],
        }
    )
    return settings.model_copy(
        update={
            "node": node,
            "group": settings.group.model_copy(
                update={"name": TopicNames.shard_group(cluster, partition)}
            ),
            "cluster": settings.cluster.model_copy(update={"name": None}),
            # The cluster node created and checked the topics (and serves the admin API:
            # ``Shard`` says so to its node, so outcomes are kept as the admin settings say).
            "topics": settings.topics.model_copy(update={"create": False}),
            "rebuild": settings.rebuild.model_copy(update={"check_inner_topic": False}),
        }
    )


def shard_dir(data_dir: Path, partition: int) -> Path:
    """Where a node keeps partition ``partition``'s store."""
    return data_dir / f"p{partition}"

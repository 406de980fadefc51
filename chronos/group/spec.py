"""A replica group's identity, resolved once from the settings and passed down."""

from __future__ import annotations

from dataclasses import dataclass

from chronos.names import TopicNames
from chronos.settings import ChronosSettings, GroupSettings


@dataclass(frozen=True)
class GroupSpec:
    """Who this replica is and what its group's Kafka names are.

    Built by :meth:`of` at the entry point; every group component takes it instead of
    re-deriving names from the settings (and re-checking that the group has a name).

    Parameters:
        name: the group's name (``group.name``).
        node_id: this replica (``node.node_id``; also its clients' ``client.id``).
        inner_topic: the inner topic every replica ingests.
        dead_letter_topic: where undeliverable records go.
        election_topic: the one-partition topic whose assignment names the master.
        election_group: the consumer group of the election.
        progress_topic: the compacted topic of committed progress.
        members_topic: the compacted topic where each replica says its state.
        transactional_id: the master's producer id; one per group, so a new master fences.
        node_group: this replica's ingest consumer group (advisory offsets, lag).
        settings: the group's timings.
        names: the installation's names (for the few built per use).
        partitions: the inner partitions the group delivers (``node.owned_partitions``; a
            cluster's partition is a group of one); empty: all of them.
    """

    name: str
    node_id: str
    inner_topic: str
    dead_letter_topic: str
    election_topic: str
    election_group: str
    progress_topic: str
    members_topic: str
    transactional_id: str
    node_group: str
    settings: GroupSettings
    names: TopicNames
    partitions: tuple[int, ...] = ()

    @classmethod
    def of(cls, settings: ChronosSettings) -> GroupSpec | None:
        """The spec of the group the settings name; None for a node alone."""
        name = settings.group.name
        if name is None:
            return None
        names = settings.topics.names
        node = settings.node.node_id
        return cls(
            name=name,
            node_id=node,
            inner_topic=names.inner,
            dead_letter_topic=names.dead_letter,
            election_topic=names.election(name),
            election_group=names.election_group(name),
            progress_topic=names.progress(name),
            members_topic=names.members(name),
            transactional_id=names.transactional_id(name),
            node_group=names.node_group(node),
            settings=settings.group,
            names=names,
            partitions=tuple(settings.node.owned_partitions or ()),
        )

    def progress_reader_group(self, reader: str) -> str:
        """Group id of one progress-topic reader of this replica (never joined)."""
        return self.names.progress_reader_group(self.node_id, reader)

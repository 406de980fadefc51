"""The election against a stub consumer: the coordinator's callbacks decide who is master.

Each test names the mutant it was seen to catch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from chronos.group.election import Election, RebalanceCallback
from chronos.group.spec import GroupSpec
from chronos.kafka.librdkafka import ClientErrors
from chronos.settings import ChronosSettings, KafkaValue


@dataclass
class ErrorMessage:
    """What ``poll`` returns for a consumer error."""

    error_: KafkaError

    def error(self) -> KafkaError:
        return self.error_


@dataclass
class StubConsumer:
    """Records how the election subscribed; the test plays the coordinator."""

    group_id: str
    options: Mapping[str, KafkaValue]
    topics: list[str] = field(default_factory=list)
    callbacks: dict[str, RebalanceCallback | None] = field(default_factory=dict)
    errors: list[KafkaError] = field(default_factory=list)
    closed: bool = False

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        self.topics = topics
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}

    def poll(self, timeout: float = -1) -> Any:
        return ErrorMessage(self.errors.pop(0)) if self.errors else None

    def close(self) -> None:
        self.closed = True

    def fire(self, event: str, topic: str) -> None:
        callback = self.callbacks[event]
        assert callback is not None, f"no {event} callback: the election would never hear it"
        callback(self, [TopicPartition(topic, 0)])


@dataclass
class Setup:
    election: Election
    consumers: list[StubConsumer]
    changes: list[bool]
    fatal: list[str]
    spec: GroupSpec

    @property
    def consumer(self) -> StubConsumer:
        (consumer,) = self.consumers
        return consumer


@pytest.fixture
def setup() -> Setup:
    settings = ChronosSettings.model_validate(
        {"node": {"node_id": "a"}, "topics": {"namespace": "ns"}, "group": {"name": "g"}}
    )
    spec = GroupSpec.of(settings)
    assert spec is not None
    consumers: list[StubConsumer] = []
    changes: list[bool] = []
    fatal: list[str] = []

    def open_consumer(
        group_id: str, _errors: ClientErrors, options: Mapping[str, KafkaValue]
    ) -> StubConsumer:
        consumers.append(StubConsumer(group_id, options))
        return consumers[-1]

    errors = ClientErrors("election", fatal.append)
    election = Election(spec, open_consumer, errors, changes.append)
    election.step()  # joins: subscribes on the first step
    return Setup(election, consumers, changes, fatal, spec)


def test_it_joins_the_groups_election_with_dynamic_membership(setup: Setup) -> None:
    consumer = setup.consumer
    assert consumer.group_id == setup.spec.election_group
    assert consumer.topics == [setup.spec.election_topic]
    assert consumer.options["partition.assignment.strategy"] == "cooperative-sticky"
    assert "group.instance.id" not in consumer.options  # a dead master's role moves on
    assert consumer.options["session.timeout.ms"] == 6000


def test_the_member_assigned_the_election_partition_is_elected(setup: Setup) -> None:
    setup.consumer.fire("assign", "some.other.topic")
    assert not setup.election.elected and setup.changes == []
    setup.consumer.fire("assign", setup.spec.election_topic)
    assert setup.election.elected and setup.changes == [True]


def test_a_member_the_coordinator_dropped_is_no_longer_elected(setup: Setup) -> None:
    """Mutant caught: ``on_lost`` not wired to the election (a master cut off from the
    coordinator kept believing it leads until its next rebalance)."""
    setup.consumer.fire("assign", setup.spec.election_topic)
    setup.consumer.fire("lost", setup.spec.election_topic)
    assert not setup.election.elected and setup.changes == [True, False]


def test_a_revoked_partition_ends_the_role(setup: Setup) -> None:
    setup.consumer.fire("assign", setup.spec.election_topic)
    setup.consumer.fire("revoke", setup.spec.election_topic)
    assert not setup.election.elected and setup.changes == [True, False]


def test_leaving_closes_the_consumer_and_reports_the_role_given_up(setup: Setup) -> None:
    """Closing leaves the group at once, so a backup takes over without a session timeout."""
    setup.consumer.fire("assign", setup.spec.election_topic)
    setup.election.finish()
    assert setup.consumer.closed and setup.changes == [True, False]


def test_a_refused_group_ends_the_node(setup: Setup) -> None:
    """Mutant caught: poll errors only logged (the node stayed up for ever, never elected)."""
    setup.consumer.errors.append(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    setup.election.step()
    assert len(setup.fatal) == 1 and "GROUP_AUTHORIZATION_FAILED" in setup.fatal[0]


def test_a_transient_poll_error_is_only_logged(setup: Setup) -> None:
    setup.consumer.errors.append(KafkaError(KafkaError._TRANSPORT))
    setup.election.step()
    assert setup.fatal == []

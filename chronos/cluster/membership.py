"""Who is in the cluster: Kafka's consumer-group membership, read back by every member.

Why a consumer group, and which protocol: the classic protocol (with the cooperative-sticky
assignor, so a member joining never revokes anything), which librdkafka has had for years and
Apache Kafka accepts with a session down to 6 s by default; KIP-848's ``consumer`` protocol
(confluent-kafka 2.12+) takes a 45 s session on a stock broker, and neither runs a custom
assignor from Python. So Kafka decides who is a member (join, leave at a clean stop, expiry of a
silent member after ``group.session_timeout_ms``), and placement is computed by every member
from the member list (``placement.py``), read here with ``describe_consumer_groups``.

The topic subscribed to has one partition and no records: the subscription is only what makes
a member. Members are named by their ``client.id``, the node's id, so a restarted node is the
same member for placement and gets its partitions (and its stores on disk) back.

Failure cases: a member killed stays listed until its session expires; its partitions' standbys
do not wait for that (each shard's master watch). Kafka not answering the description: the last
list stands (placement does not flap on a slow coordinator).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog
from confluent_kafka import KafkaError, KafkaException

from chronos.group.election import ElectionConsumer
from chronos.kafka.clients import MEMBERSHIP_CONSUMER
from chronos.kafka.librdkafka import ClientErrors
from chronos.lifecycle import LoopWorker
from chronos.settings import KafkaValue

log = structlog.get_logger(__name__)

_POLL_S = 0.1

#: Builds the membership's consumer: (group id, its error handler, options) -> consumer.
OpenConsumer = Callable[[str, ClientErrors, Mapping[str, KafkaValue]], ElectionConsumer]


class AdminLike(Protocol):
    """What ``GroupDescriber`` asks of an admin client (confluent's ``AdminClient``)."""

    def describe_consumer_groups(self, group_ids: list[str]) -> dict[str, Any]: ...


#: The client ids of the group's members now (raises KafkaException or TimeoutError when
#: Kafka does not answer).
DescribeMembers = Callable[[], frozenset[str]]


class Membership(LoopWorker):
    """Keeps this node in its cluster's consumer group and knows the other members.

    Parameters:
        node_id: this member's name (its ``client.id``).
        topic: the cluster's one-partition membership topic.
        group: the cluster's consumer group.
        options: the consumer's session timeout and heartbeat.
        open_consumer: builds the consumer.
        errors: the consumer's error handler (an authorization failure ends the node).
        describe: the members' client ids, as Kafka describes the group.
        interval_s: how often to ask.
        on_change: called with the new member list when it changed (from this thread).
    """

    def __init__(
        self,
        *,
        node_id: str,
        topic: str,
        group: str,
        options: Mapping[str, KafkaValue],
        open_consumer: OpenConsumer,
        errors: ClientErrors,
        describe: DescribeMembers,
        interval_s: float,
        on_change: Callable[[frozenset[str]], None],
    ) -> None:
        super().__init__("membership")
        self._node_id = node_id
        self._topic = topic
        self._group = group
        self._options = {**options, **MEMBERSHIP_CONSUMER}
        self._open_consumer = open_consumer
        self._errors = errors
        self._describe = describe
        self._interval_s = interval_s
        self._on_change = on_change
        self._consumer: ElectionConsumer | None = None
        self._members: frozenset[str] | None = None
        self._asked_at = -interval_s
        self._lock = threading.Lock()

    @property
    def members(self) -> frozenset[str] | None:
        """The members as last described (None before the first answer)."""
        with self._lock:
            return self._members

    def step(self) -> None:
        if self._consumer is None:
            consumer = self._open_consumer(self._group, self._errors, self._options)
            consumer.subscribe([self._topic])
            self._consumer = consumer
        message = self._consumer.poll(_POLL_S)
        error = None if message is None else message.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            self._errors(error)
        now = time.monotonic()
        if now - self._asked_at < self._interval_s:
            return
        self._asked_at = now
        try:
            members = self._describe()
        except (KafkaException, TimeoutError) as exc:  # the last list stands
            log.debug("membership_not_described", error=str(exc))
            return
        with self._lock:
            changed = members != self._members
            self._members = members
        if changed:
            log.info("cluster_members", members=sorted(members))
            self._on_change(members)

    def wait_seen_gone(self, timeout_s: float) -> bool:
        """After a stop: wait until Kafka no longer lists this member, then one interval more,
        in which every other member asks again and sees it gone. False if Kafka kept listing
        it for ``timeout_s`` (or did not answer)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self._node_id not in self._describe():
                    time.sleep(self._interval_s)
                    return True
            except (KafkaException, TimeoutError):
                pass
            time.sleep(min(0.05, self._interval_s))
        return False

    def finish(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            # Leaving the group drops this member at once, not after a session timeout.
            consumer.close()


class GroupDescriber:
    """The member list of ``group`` (``describe_consumer_groups``), from an admin client that is
    replaced after any failed or unanswered description.

    Why replaced: librdkafka (2.16, issue confluentinc/librdkafka#4605, open) aborts the whole
    process with ``rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'`` when a
    coordinator request of an admin client was pending across a broker restart. Measured here:
    describing every 500 ms, the process died on the second kill -9 and restart of the broker;
    dropping the client after each failure survived every restart (and took two cluster nodes
    of three down in ``cluster_check.py --scenario broker`` before).

    Parameters:
        new_admin: builds an admin client.
        group: the consumer group.
        timeout_s: how long one description may take.
    """

    def __init__(self, new_admin: Callable[[], AdminLike], group: str, timeout_s: float) -> None:
        self._new_admin = new_admin
        self._group = group
        self._timeout_s = timeout_s
        self._admin: AdminLike | None = None
        self._lock = threading.Lock()

    def __call__(self) -> frozenset[str]:
        with self._lock:  # the membership's thread, and a leaving node's
            if self._admin is None:
                self._admin = self._new_admin()
            admin = self._admin
            try:
                futures = admin.describe_consumer_groups([self._group])
                described = futures[self._group].result(self._timeout_s)
            except BaseException:
                self._admin = None  # its pending requests go with it
                raise
            return frozenset(member.client_id for member in described.members)

"""Follows the policy topic (``<namespace>.policy``): the delivery policies operators set live
(``chronos policy set``), applied to this node's ``Policies`` as they come.

Every node reads the whole topic, from its beginning (compacted: one record per topic), so a
node alone, each replica of a group and a master after a takeover all deliver with the same
policies. It reads to the topic's end before the node delivers (``catch_up``): a node started
after a change never delivers with the configured policy that the change replaced.
"""

from __future__ import annotations

import time

import structlog
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from chronos.delivery.policies import Policies, decode
from chronos.kafka.batches import read_ready
from chronos.kafka.librdkafka import ClientErrors
from chronos.lifecycle import LoopWorker
from chronos.settings import check_policy_topic

log = structlog.get_logger(__name__)

_POLL_S = 0.5


class PolicyFollower(LoopWorker):
    """Applies the policy topic's records to ``policies``.

    Parameters:
        topic: the policy topic.
        consumer: reads it (assigned here, never joins a group).
        errors: the consumer's error handler.
        policies: what it changes.
        catch_up_s: longest wait, at start, for the topic's end.
    """

    def __init__(
        self,
        topic: str,
        consumer: Consumer,
        errors: ClientErrors,
        policies: Policies,
        catch_up_s: float = 10.0,
    ) -> None:
        super().__init__("policies")
        self._topic = topic
        self._consumer = consumer
        self._errors = errors
        self._policies = policies
        self._catch_up_s = catch_up_s

    def start(self) -> None:
        self._consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
        self.catch_up()
        super().start()

    def catch_up(self) -> bool:
        """Read up to the topic's end as of now; False when that took over ``catch_up_s``."""
        deadline = time.monotonic() + self._catch_up_s
        try:
            _low, end = self._consumer.get_watermark_offsets(
                TopicPartition(self._topic, 0), timeout=self._catch_up_s
            )
        except KafkaException as exc:
            log.warning("policy_topic_unread", topic=self._topic, error=str(exc))
            return False
        position = 0
        while position < end:
            if time.monotonic() >= deadline:
                log.warning("policy_topic_behind", topic=self._topic, read_to=position, end=end)
                return False
            for message in read_ready(self._consumer, 100, _POLL_S):
                offset = self._apply(message)
                if offset is not None:
                    position = offset + 1
        return True

    def step(self) -> None:
        for message in read_ready(self._consumer, 100, _POLL_S):
            self._apply(message)

    def _apply(self, message: Message) -> int | None:
        """Apply one record; its offset (None for an error event)."""
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                self._errors(error)
            return None
        offset: int | None = message.offset()
        key, value = message.key(), message.value()
        try:
            topic = check_policy_topic((key or b"").decode())
            policy = None if value is None else decode(value)
        except (UnicodeDecodeError, ValueError) as exc:
            log.error("policy_record_ignored", offset=offset, reason=str(exc))
            return offset
        if self._policies.set(topic, policy):
            shown = None if policy is None else policy.model_dump(exclude_none=True)
            log.info("delivery_policy_changed", topic=topic, policy=shown)
        return offset

    def finish(self) -> None:
        self._consumer.close()

"""``chronos policy set|clear|list``: the delivery policy of a target topic, changed live.

A record in the policy topic (``<namespace>.policy``) that every node follows
(``node/policy_follower.py``): ``set`` replaces the topic's configured policy
(``delivery.topics``) whole, ``clear`` brings it back; ``"*"`` covers every topic without its
own. The command returns once Kafka acknowledged the record; nodes apply it as they read it.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from chronos.arguments import add_config, settings_from

if TYPE_CHECKING:
    from chronos.settings import TopicPolicy

#: Longest wait for Kafka's acknowledgement, and for reading the policy topic.
_TIMEOUT_S = 30.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "policy", help="set, clear or list the delivery policy of target topics, live"
    )
    actions = parser.add_subparsers(dest="action", required=True)
    put = actions.add_parser(
        "set", help="replace a topic's policy on every node (its configured one included)"
    )
    put.add_argument("topic", help='a target topic, or "*" for every topic without its own')
    put.add_argument("--rate", type=float, help="messages/s delivered to it")
    put.add_argument("--burst", type=int, help="messages let out at once (default rate / 10)")
    put.add_argument("--max-attempts", type=int, help="dead-letter after this many failures")
    put.add_argument("--max-age", type=float, help="dead-letter a failure this long past due, s")
    put.add_argument("--backoff-initial-ms", type=int, help="first retry delay, ms")
    put.add_argument("--backoff-max-ms", type=int, help="longest retry delay, ms")
    add_config(put)
    put.set_defaults(func=set_main)
    clear = actions.add_parser("clear", help="back to the topic's configured policy")
    clear.add_argument("topic", help='a target topic, or "*"')
    add_config(clear)
    clear.set_defaults(func=clear_main)
    listing = actions.add_parser("list", help="the configured and the live policies, as JSON")
    add_config(listing)
    listing.set_defaults(func=list_main)


def _policy_of(args: argparse.Namespace) -> dict[str, Any]:
    fields = {
        "rate": args.rate,
        "burst": args.burst,
        "max_attempts": args.max_attempts,
        "max_age_s": args.max_age,
        "backoff_initial_ms": args.backoff_initial_ms,
        "backoff_max_ms": args.backoff_max_ms,
    }
    return {name: value for name, value in fields.items() if value is not None}


def set_main(args: argparse.Namespace) -> int:
    from pydantic import ValidationError as PydanticError

    from chronos.errors import ValidationError
    from chronos.settings import TopicPolicy

    try:
        policy = TopicPolicy.model_validate(_policy_of(args))
    except PydanticError as exc:
        first = exc.errors()[0]
        raise ValidationError(".".join(map(str, first["loc"])), first["msg"]) from exc
    _write(args, args.topic, policy)
    print(json.dumps({"topic": args.topic, "policy": policy.model_dump(exclude_none=True)}))
    return 0


def clear_main(args: argparse.Namespace) -> int:
    _write(args, args.topic, None)
    print(json.dumps({"topic": args.topic, "policy": None}))
    return 0


def _write(args: argparse.Namespace, topic: str, policy: TopicPolicy | None) -> None:
    """One record of the policy topic, acknowledged by Kafka (the topic made when missing)."""
    from proxy.client import DelayClient

    with DelayClient(settings_from(args)) as client:
        client.set_policy(topic, policy)


def list_main(args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from chronos.delivery.policies import Policies, decode
    from chronos.kafka.admin import ensure_topics
    from chronos.kafka.clients import KafkaClients
    from chronos.settings import check_policy_topic

    settings = settings_from(args)
    ensure_topics(settings, _TIMEOUT_S)
    policies = Policies(settings.delivery.topics)
    topic = settings.topics.names.policy
    clients = KafkaClients(settings.kafka, settings.node.node_id)
    consumer = clients.consumer(
        f"{topic}.list", clients.errors("policy"), {"enable.auto.commit": False}
    )
    try:
        _low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), _TIMEOUT_S)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        position = 0
        while position < end:
            message = consumer.poll(_TIMEOUT_S)
            if message is None:
                break
            offset = message.offset()
            if message.error() is not None or offset is None:
                continue
            position = offset + 1
            value = message.value()
            try:
                name = check_policy_topic((message.key() or b"").decode())
                policies.set(name, None if value is None else decode(value))
            except (UnicodeDecodeError, ValueError):
                continue  # the nodes ignore it too (policy_record_ignored)
    finally:
        consumer.close()
    print(json.dumps(policies.as_json(), indent=2))
    return 0

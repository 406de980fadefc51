"""``chronos check``: validate the settings and reach Kafka."""

from __future__ import annotations

import argparse

from chronos.arguments import add_config, settings_from


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("check", help="validate config and Kafka connectivity")
    add_config(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chronos.kafka.clients import KafkaClients  # Kafka clients only when asked
    from chronos.node.partitions import owned_partitions

    settings = settings_from(args)
    print(f"settings ok (node {settings.node.node_id}, data {settings.node.data_dir})")
    admin = KafkaClients(settings.kafka, settings.node.node_id).admin()
    topics = admin.list_topics(timeout=10).topics
    names = settings.topics.names
    for topic in (names.inner, names.dead_letter):
        print(f"{topic}: {'present' if topic in topics else 'missing (created by chronos run)'}")
    inner = topics.get(names.inner)
    if inner is not None and inner.partitions:
        # What `chronos run` would refuse at start, said now (ConfigError names the partitions).
        owned = owned_partitions(settings.node.owned_partitions, len(inner.partitions))
        print(f"{names.inner}: {len(inner.partitions)} partitions, this node reads {owned}")
    print(f"kafka ok ({settings.kafka.bootstrap_servers}, {len(topics)} topics)")
    return 0

"""``chronos topics check|fix``: whether the inner topic keeps every pending message's record
until its refresh, and setting what it needs (``chronos.kafka.topic_config``); ``chronos
topics create``: a target topic, for brokers that create none on demand (as production
clusters and the compose deployment run)."""

from __future__ import annotations

import argparse

from chronos.arguments import add_config, settings_from


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "topics",
        help="check or fix the inner topic's cleanup.policy and retention; create a target topic",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    for name, main, about in (
        (
            "check",
            check_main,
            "exit 1, naming each problem, when the inner topic could remove the record of a "
            "pending message before its refresh",
        ),
        (
            "fix",
            fix_main,
            "refresh mode: set cleanup.policy=delete, retention.bytes=-1 and retention.ms of "
            "at least 2 x rebuild.refresh_interval_s on the inner topic; compact mode: "
            "cleanup.policy=compact, delete.retention.ms and the cleaner's settings",
        ),
        (
            "migrate",
            migrate_main,
            "move a refresh-mode deployment to compact mode, once, with every node stopped: "
            "restate what this node's store holds into the inner topic, end the ids it forgot, "
            "then set compact mode's topic settings (run it on the master's store with "
            "rebuild.mode = compact in the config)",
        ),
    ):
        action = actions.add_parser(name, help=about)
        add_config(action)
        action.set_defaults(func=main)
    create = actions.add_parser("create", help="create target topics (no error if they exist)")
    create.add_argument("names", nargs="+", metavar="TOPIC", help="target topic names")
    create.add_argument(
        "--partitions", type=int, default=1, help="partitions of each new topic (default 1)"
    )
    add_config(create)
    create.set_defaults(func=create_main)


def create_main(args: argparse.Namespace) -> int:
    from chronos.kafka.admin import create_topic
    from chronos.validation import validate_topic

    settings = settings_from(args)
    for name in args.names:
        validate_topic(name, settings.topics.names)  # never an internal topic
        create_topic(settings, name, args.partitions)
        print(f"topic {name}: exists")
    return 0


def check_main(args: argparse.Namespace) -> int:
    # Kafka clients only when asked.
    from chronos.kafka.clients import KafkaClients
    from chronos.kafka.topic_config import REMEDY, advice_for, problems_for, read_topic_config

    settings = settings_from(args)
    topic = settings.topics.names.inner
    admin = KafkaClients(settings.kafka, settings.node.node_id).admin()
    config = read_topic_config(admin, topic, 30.0)
    if config is None:
        # What a node does too: it starts, with a warning.
        print(
            f"inner topic {topic}: not checked, the broker at "
            f"{settings.kafka.bootstrap_servers} does not report its configuration"
        )
        return 0
    problems = problems_for(config, settings.rebuild)
    for advice in advice_for(config, settings.rebuild):
        print(f"inner topic {topic}: advice (chronos topics fix): {advice}")
    if not problems:
        print(f"inner topic {topic}: ok")
        return 0
    print(
        f"inner topic {topic} (rebuild.mode = {settings.rebuild.mode}): a pending message "
        "could outlive its record"
    )
    for problem in problems:
        print(f"  - {problem}")
    print(REMEDY[0].upper() + REMEDY[1:])
    return 1


def fix_main(args: argparse.Namespace) -> int:
    from chronos.kafka.topic_config import fix_inner_topic

    settings = settings_from(args)
    topic = settings.topics.names.inner
    changes = fix_inner_topic(settings)
    if not changes:
        print(f"inner topic {topic}: nothing to change")
    for name, value in changes.items():
        print(f"inner topic {topic}: set {name}={value}")
    return 0


def migrate_main(args: argparse.Namespace) -> int:
    from chronos.clock import SystemClock
    from chronos.runtime.migration import migrate_to_compact

    settings = settings_from(args)
    topic = settings.topics.names.inner
    if settings.rebuild.mode != "compact":
        print(
            "set rebuild.mode = compact in the configuration first (the nodes start with it "
            "after the migration, and it is compact mode's topic settings that are applied)"
        )
        return 2
    if settings.cluster.name is not None:
        # A cluster's schedules are per partition (``<data_dir>/p<N>`` or the node shape's
        # families under ``<data_dir>/node``): the store this reads would be empty, nothing
        # would be restated, and the cleaner would then drop what the moves left.
        print(
            f"cluster {settings.cluster.name}: chronos topics migrate moves a node alone or a "
            "replica group (one store); a cluster does not move to compact mode in place yet. "
            "Start a new cluster in compact mode, or migrate a node alone or a group first "
            "and then `chronos cluster migrate` into a cluster in compact mode"
        )
        return 2
    migrated = migrate_to_compact(settings, SystemClock())
    print(
        f"inner topic {topic}: read {migrated.records_read} records; restated "
        f"{migrated.messages} messages and {migrated.cancels} cancels of the store at "
        f"{settings.node.data_dir}; ended {migrated.tombstones} ids it no longer holds"
    )
    if migrated.unread_records:
        print(
            f"inner topic {topic}: {migrated.unread_records} records past what this store "
            "ingested are left to the nodes (they read them in compact mode); if another "
            "node's store ingested them in refresh mode, migrate from that store instead"
        )
    for name, value in migrated.topic_changes.items():
        print(f"inner topic {topic}: set {name}={value}")
    print("start the nodes with rebuild.mode = compact")
    return 0

"""``chronos cluster``: a cluster's members and, per partition, its owner, standbys, who
delivers it now and each replica's state and ingest lag."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from chronos.arguments import add_config, settings_from

if TYPE_CHECKING:
    from chronos.cluster.status import ClusterStatus, PartitionView


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "cluster",
        help="show the cluster: members, and per partition owner, standbys, delivery, lag",
    )
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=main)
    actions = parser.add_subparsers(dest="action")
    migrate = actions.add_parser(
        "migrate",
        help="make a stopped node alone or replica group's progress this cluster's "
        "(once, before the cluster's first start)",
    )
    add_config(migrate)
    source = migrate.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-node", metavar="NODE_ID", help="a node alone's node.node_id")
    source.add_argument("--from-group", metavar="NAME", help="a replica group's group.name")
    migrate.set_defaults(func=migrate_main)


def migrate_main(args: argparse.Namespace) -> int:
    """Exit 0 once every partition's share was written."""
    from chronos.cluster.migrate import migrate

    settings = settings_from(args)
    update: dict[str, object] = {"cluster": settings.cluster.model_copy(update={"name": None})}
    if args.from_group:
        update["group"] = settings.group.model_copy(update={"name": args.from_group})
    else:
        update["group"] = settings.group.model_copy(update={"name": None})
        update["node"] = settings.node.model_copy(update={"node_id": args.from_node})
    done = migrate(settings.model_copy(update=update), settings)
    seek = "no cut (it delivered nothing)" if done.seek_ms is None else f"seek {done.seek_ms}"
    print(
        f"migrated {done.source} into cluster {settings.cluster.name}: {done.partitions} "
        f"partitions, {seek}, {done.repeats} repeat states; start the cluster's nodes now"
    )
    return 0


def main(args: argparse.Namespace) -> int:
    """Exit 0 when every partition is delivered by someone, 1 otherwise."""
    # Kafka clients only when asked.
    from chronos.cluster.status import cluster_status
    from chronos.kafka.clients import KafkaClients

    settings = settings_from(args)
    status = cluster_status(settings, KafkaClients(settings.kafka, "chronos-cli"))
    if args.json:
        print(json.dumps(status.as_dict()))
    else:
        print("\n".join(lines(status)))
    return 1 if status.undelivered else 0


def lines(status: ClusterStatus) -> list[str]:
    """The human view: a headline, then a line per partition."""
    members = ", ".join(status.members) or "none"
    out = [
        f"cluster {status.cluster}: {len(status.members)} members ({members}), "
        f"{len(status.partitions)} partitions, {status.standby_replicas} standby each"
    ]
    out.extend(_partition_line(view) for view in status.partitions)
    undelivered = status.undelivered
    if undelivered:
        out.append(f"NOT DELIVERED NOW: partitions {undelivered} (a takeover or restore)")
    else:
        out.append(f"every partition is delivered ({len(status.partitions)})")
    return out


def _partition_line(view: PartitionView) -> str:
    standbys = ",".join(view.standbys) or "-"
    if view.delivering is None:
        delivery = "nobody delivers"
    else:
        committed = "" if view.committed_age_ms is None else f", {view.committed_age_ms} ms ago"
        delivery = f"delivered by {view.delivering} (term {view.term}{committed})"
        if view.delivering != view.owner:
            delivery += ", moving to its owner"
    replicas = "; ".join(
        f"{r.node} {r.state or '?'} lag {'?' if r.ingest_lag is None else r.ingest_lag}"
        + (f" waits for {r.detail['waits_for']}" if "waits_for" in r.detail else "")
        for r in view.replicas
    )
    return (
        f"  p{view.partition:<3} owner {view.owner or '-':<12} standbys {standbys:<16} "
        f"{delivery}  [{replicas}]"
    )

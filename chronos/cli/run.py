"""``chronos run``: a broker node in the foreground until SIGTERM."""

from __future__ import annotations

import argparse
import os

from chronos.arguments import add_config, settings_from


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "run",
        help="run a broker node (a member of cluster.name, a replica of group.name, or alone)",
    )
    add_config(parser)
    # Stop signals before the node installs its own handling end it cleanly (cli/entry.py).
    parser.set_defaults(func=main, early_signals=True)


def main(args: argparse.Namespace) -> int:
    from chronos.logs import configure_logging
    from chronos.runtime.cluster_node import ClusterNode
    from chronos.runtime.member import ClusterMember
    from chronos.runtime.node import Node

    settings = settings_from(args)
    configure_logging(settings.log)
    # Every file the node creates (store, checkpoints) is its user's alone.
    os.umask(0o077)
    if settings.cluster.name is not None:
        if settings.cluster.shape == "node":
            return ClusterMember(settings).run()
        return ClusterNode(settings).run()
    return Node(settings).run()

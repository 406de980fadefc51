"""``chronos run``: a broker node in the foreground until SIGTERM."""

from __future__ import annotations

import argparse

from chronos.cli.args import add_config, settings_from
from chronos.logs import configure_logging
from chronos.node.node import Node
from chronos.node.roles import ROLES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("run", help="run a broker node")
    add_config(parser)
    parser.add_argument(
        "--role",
        choices=sorted(ROLES),
        default="master",
        help="what the node runs (default master)",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log)
    return Node(settings, role=args.role).run()
